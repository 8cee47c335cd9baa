import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { decodeBody } from '../../core/http/body.ts';
import { AppError } from '../../shared/errors.ts';
import { maxNestingDepth, parseQuery, storable, validate } from '../../core/http/validate.ts';
import { parsedTexts } from '../helpers/json-parses.ts';

const refusal = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof AppError, `an AppError, not ${String(err)}`);
    assert.equal(err.status, 400);
    return err.message;
  }
  assert.fail('accepted');
};

/** Issue 13 item 8: what no route can store or read exactly is a 400 at the boundary, whatever the schema. */
describe('values no route can store', () => {
  const free = Type.Object({ v: Type.Unknown() });

  it('refuses NULs and lone surrogates in strings and keys, at any depth', () => {
    assert.match(
      refusal(() => validate(free, { v: 'a\u0000b' }, 'body')),
      /^body\/v: .*NUL/,
    );
    assert.match(
      refusal(() => validate(free, { v: { deep: ['ok', '\ud800'] } }, 'body')),
      /^body\/v\/deep\/1: /,
    );
    assert.match(
      refusal(() => validate(free, { v: { 'k\u0000': 1 } }, 'body')),
      /key/,
    );
    assert.match(
      refusal(() => validate(free, { v: '\udc00x' }, 'body')),
      /well-formed/,
    );
    assert.deepEqual(
      validate(free, { v: 'emoji 😀 and ünïcödé' }, 'body'),
      { v: 'emoji 😀 and ünïcödé' },
      'surrogate pairs are fine',
    );
  });

  it('refuses numbers that overflow, query integers beyond 2^53, and nesting past the bound, without exhausting the stack', async () => {
    assert.match(
      refusal(() => validate(free, JSON.parse('{"v":1e999}'), 'body')),
      /finite/,
    );
    assert.match(
      refusal(() => validate(free, JSON.parse('{"v":[-1e999]}'), 'body')),
      /finite/,
    );
    assert.deepEqual(
      validate(free, { v: [1.795e18, 0.1, 1.5e-300] }, 'body'),
      { v: [1.795e18, 0.1, 1.5e-300] },
      "JSON may carry big numbers (a policy input's now_ns)",
    );
    const limit = Type.Object({ n: Type.Integer() });
    assert.match(
      refusal(() => validate(limit, { n: String(2 ** 53) }, 'query', true)),
      /exactly/,
    );
    assert.deepEqual(validate(limit, { n: String(Number.MAX_SAFE_INTEGER) }, 'query', true), {
      n: Number.MAX_SAFE_INTEGER,
    });
    const deep = JSON.parse(`${'['.repeat(100_000)}${']'.repeat(100_000)}`);
    assert.match(
      refusal(() => storable(deep, 'body')),
      new RegExp(`more than ${maxNestingDepth}`),
    );
    // A body is held to the same bound before it is parsed: the same answer, without the parse.
    const nested = (n: number) => Buffer.from(`{"v":${'['.repeat(n - 1)}${']'.repeat(n - 1)}}`);
    assert.deepEqual(decodeBody('json', 'application/json', nested(maxNestingDepth)), {
      v: JSON.parse(nested(maxNestingDepth).toString()).v,
    });
    assert.doesNotThrow(() => storable(JSON.parse(nested(maxNestingDepth).toString()), 'body'));
    assert.match(
      refusal(() => storable(JSON.parse(nested(maxNestingDepth + 1).toString()), 'body')),
      new RegExp(`more than ${maxNestingDepth}`),
    );
    const parsed = await parsedTexts(() => {
      for (const n of [maxNestingDepth + 1, 2_000_000])
        assert.match(
          refusal(() => decodeBody('json', 'application/json', nested(n))),
          new RegExp(`^body: is nested more than ${maxNestingDepth} levels deep`),
        );
    });
    assert.deepEqual(parsed, [], 'refused before any parse');
    assert.match(
      refusal(() =>
        validate(
          Type.Object({ offset: Type.Integer({ minimum: 0 }) }),
          { offset: '901347929129193832448' },
          'query',
          true,
        ),
      ),
      /^query\/offset/,
    );
  });

  it('refuses percent-escapes and body bytes that are not UTF-8, instead of reading U+FFFD', () => {
    assert.deepEqual(parseQuery('?a=1&b=x+y&c=%C3%BC'), { a: '1', b: 'x y', c: 'ü' });
    // A parameter given twice is refused, whatever the two values (or the same one twice).
    // Numbers in a query are written plainly or refused: TypeBox alone read `1e3` as 1.
    const Limit = Type.Object({ limit: Type.Integer(), rate: Type.Number() });
    assert.deepEqual(validate(Limit, { limit: '12', rate: '-0.5' }, 'query', true), {
      limit: 12,
      rate: -0.5,
    });
    for (const [limit, rate] of [
      ['1e3', '1'],
      ['1.5', '1'],
      ['0x10', '1'],
      [' 5', '1'],
      ['7', '1e2'],
      ['7', '.5'],
    ])
      assert.match(
        refusal(() => validate(Limit, { limit, rate }, 'query', true)),
        /^query\/(limit|rate)/,
        `${limit} ${rate}`,
      );
    for (const q of ['?a=1&a=2', '?a=1&b=2&a=1', '?a&a', '?a=1&%61=2'])
      assert.match(
        refusal(() => parseQuery(q)),
        /given more than once/,
        q,
      );
    for (const q of ['a=%ff', 'a=%ED%A0%80', '%C3=1', 'a=%E0%A0'])
      assert.match(
        refusal(() => parseQuery(q)),
        /UTF-8/,
        q,
      );
    assert.match(
      refusal(() =>
        decodeBody(
          'json',
          'application/json',
          Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x22, 0x7d]),
        ),
      ),
      /UTF-8/,
    );
    assert.match(
      refusal(() => decodeBody('form', 'application/x-www-form-urlencoded', Buffer.from('a=%ff'))),
      /UTF-8/,
    );
  });

  it('takes only dates and instants PostgreSQL reads as the same day and instant', () => {
    const at = Type.Object({ at: Type.String({ format: 'date-time' }) });
    const day = Type.Object({ d: Type.String({ format: 'date' }) });
    for (const v of ['2024-02-29T12:00:00Z', '2024-12-31T23:59:59.999999-15:59', '0001-01-01T00:00:00+00:00'])
      validate(at, { at: v }, 'body');
    for (const v of [
      '2023-02-29T12:00:00Z',
      '2024-04-31T00:00:00Z',
      '0000-01-01T00:00:00Z',
      '2024-01-01T24:00:00Z',
      '2024-01-01T23:59:60Z',
      '2024-01-01T00:00:00+16:00',
    ])
      refusal(() => validate(at, { at: v }, 'body'));
    validate(day, { d: '2000-02-29' }, 'body');
    for (const v of ['1900-02-29', '2024-13-01', '0000-06-01'])
      refusal(() => validate(day, { d: v }, 'body'));
  });
});
