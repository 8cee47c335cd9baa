/** shared/json-body.ts repeatedKey: the key one JSON object names twice, which JSON.parse would hide. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { repeatedKey } from '../../shared/json-body.ts';

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
