/**
 * shared/json-body.ts repeatedKey: the key one JSON object names twice, which JSON.parse would hide;
 * jsonStructureProblem: a JSON text nested or listing past a bound, found before it is parsed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { jsonStructureProblem, repeatedKey } from '../../shared/json-body.ts';

describe('repeatedKey', () => {
  it('finds a key named twice in one object, at any depth, however it is spelled', () => {
    assert.equal(repeatedKey('{"scope":"a","scope":"b"}'), 'scope');
    assert.equal(repeatedKey('{ "a" : 1 ,\n "b":2, "a" :3}'), 'a');
    assert.equal(
      repeatedKey('{"scope":"a","scop\\u0065":"b"}'),
      'scope',
      'an escaped spelling is the same key',
    );
    assert.equal(repeatedKey('{"x":{"k":1,"k":2}}'), 'k');
    assert.equal(repeatedKey('[{"ok":1},{"k":[1,{"k":1,"k":2}]}]'), 'k');
    assert.equal(repeatedKey('{"":1,"":2}'), '');
    assert.equal(repeatedKey('{"__proto__":1,"__proto__":2}'), '__proto__');
  });

  it('finds none where each object names each key once', () => {
    for (const text of [
      '{"scope":"a","client_id":"b"}',
      '{"a":{"a":{"a":1}},"b":["a","a",{"a":1}]}',
      '[{"k":1},{"k":2}]',
      '{"k":"k","v":"\\"k\\":"}',
      '{"a\\"b":1,"a":2,"b":3}',
      '{"k":"\\\\","k2":"\\\\\\""}',
      '"just a string"',
      '42',
      '{}',
      '',
    ])
      assert.equal(repeatedKey(text), undefined, text);
  });

  it('never throws on text that is not JSON', () => {
    for (const text of ['{"a', '{"a":1,"a', '}}]]', '{"\\u00zz":1,"\\u00zz":2}', '{"a\\', '"\\'])
      assert.doesNotThrow(() => repeatedKey(text), text);
  });
});

describe('jsonStructureProblem', () => {
  it('counts containers and commas outside strings only', () => {
    assert.equal(jsonStructureProblem('{"a":"[[[,,,{{{","b":"\\"[,"}', 1, 1), undefined);
    assert.equal(jsonStructureProblem('{"a":"x","b":"y","c":"z"}', 1, 2), undefined);
    assert.equal(jsonStructureProblem('{"a":"x","b":"y","c":"z","d":""}', 1, 2), 'commas');
    assert.equal(jsonStructureProblem('{"a":["x"]}', 1, 2), 'depth');
    assert.equal(jsonStructureProblem('{"a":{}}', 1, 2), 'depth');
    assert.equal(jsonStructureProblem('[[],[],[]]', 2, 1), 'commas');
    assert.equal(jsonStructureProblem('"[[["', 0, 0), undefined);
    for (const text of ['', '{"a', '"\\', ']]]]', '{"a\\'])
      assert.doesNotThrow(() => jsonStructureProblem(text, 1, 1), text);
  });

  it('finds the depth past its bound as a parse would, at any length', () => {
    const deep = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    assert.equal(jsonStructureProblem(deep(32), 32, Number.POSITIVE_INFINITY), undefined);
    assert.equal(jsonStructureProblem(deep(33), 32, Number.POSITIVE_INFINITY), 'depth');
    assert.equal(jsonStructureProblem(deep(2_700_000), 32, Number.POSITIVE_INFINITY), 'depth');
  });
});
