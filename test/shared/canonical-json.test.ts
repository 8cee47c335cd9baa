import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { canonicalJson } from '../../shared/canonical-json.ts';

/** A random JSON value of the kinds the project hashes and signs. */
function randomValue(depth: number): unknown {
  const pick = (randomBytes(1)[0] as number) % (depth > 3 ? 4 : 6);
  switch (pick) {
    case 0:
      return null;
    case 1:
      return (randomBytes(1)[0] as number) % 2 === 0;
    case 2:
      return randomBytes(4).readInt32LE(0) % 100_000;
    case 3:
      return randomBytes(1 + ((randomBytes(1)[0] as number) % 6)).toString('latin1') + '"\\\u2028é😀';
    case 4:
      return Array.from({ length: (randomBytes(1)[0] as number) % 4 }, () => randomValue(depth + 1));
    default: {
      const o: Record<string, unknown> = {};
      for (let i = (randomBytes(1)[0] as number) % 5; i > 0; i--)
        o[randomBytes(2).toString('latin1') + String.fromCharCode(0xe000 - i)] = randomValue(depth + 1);
      return o;
    }
  }
}

/** True when every object in the text has its keys in code-unit order. */
function keysSorted(v: unknown): boolean {
  if (Array.isArray(v)) return v.every(keysSorted);
  if (v && typeof v === 'object') {
    const keys = Object.keys(v);
    return keys.every((k, i) => i === 0 || (keys[i - 1] as string) < k) && Object.values(v).every(keysSorted);
  }
  return true;
}

describe('canonical JSON', () => {
  it('sorts keys by UTF-16 code unit at every level, drops undefined members, writes no whitespace', () => {
    assert.equal(
      canonicalJson({ b: 1, a: [true, null, undefined], c: undefined, A: { z: 'x', y: -0.5 } }),
      '{"A":{"y":-0.5,"z":"x"},"a":[true,null,null],"b":1}',
    );
    // U+1F600 (the surrogate pair 0xD83D 0xDE00) sorts before U+E000 by code unit, after it by code point.
    assert.equal(canonicalJson({ '\u{1F600}': 1, '\uE000': 2 }), '{"\u{1F600}":1,"\uE000":2}');
    assert.equal(canonicalJson([]), '[]');
    assert.equal(canonicalJson({}), '{}');
    assert.equal(canonicalJson('a"\\\n'), '"a\\"\\\\\\n"');
  });

  it('refuses values JSON has no canonical form for', () => {
    assert.throws(() => canonicalJson(Number.NaN), TypeError);
    assert.throws(() => canonicalJson({ a: Infinity }), TypeError);
    assert.throws(() => canonicalJson(() => 1), TypeError);
    assert.throws(() => canonicalJson(10n), TypeError);
  });

  it('round-trips random values to the same value, with sorted keys', () => {
    for (let i = 0; i < 500; i++) {
      const v = randomValue(0);
      const text = canonicalJson(v);
      const parsed: unknown = JSON.parse(text);
      assert.deepEqual(parsed, JSON.parse(JSON.stringify(v)));
      assert.ok(keysSorted(parsed), text);
      assert.equal(canonicalJson(parsed), text, 'canonical of the canonical form is itself');
    }
  });
});
