import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isCanonicalPath } from '../../shared/canonical-path.ts';

describe('canonical request paths', () => {
  it('accepts the paths the routes use, percent-encoding included', () => {
    for (const p of [
      '/',
      '/v1/accounts',
      '/v1/tenants/demo:suspend',
      '/v1/disputes/0193a1b2-aaaa/attachments',
      '/v1/x/a%2Fb',
      '/v1/x/%C3%A9',
    ]) {
      assert.equal(isCanonicalPath(p), true, p);
    }
  });

  it('refuses what a URL parser would read as another path', () => {
    for (const p of [
      '/v1/docs/x\\..\\..\\..\\v1\\accounts',
      '/v1/docs/../accounts',
      '/v1/docs/./x',
      '/v1/docs/%2e%2e/accounts',
      '/v1/docs/.%2E/x',
      '/v1/docs/x#/../../accounts',
      '//evil/v1/accounts',
      '/v1//accounts',
      'v1/accounts',
      '/v1/é',
      '/v1/a b',
    ]) {
      assert.equal(isCanonicalPath(p), false, p);
    }
  });
});
