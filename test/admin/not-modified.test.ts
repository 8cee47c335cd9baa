/**
 * If-None-Match on administration GETs (SPEC 9.5, RFC 9110 13.1.2 and 15.4.5) from the outside:
 * a 304 carries what the 200 would have for caches (ETag, Cache-Control), a malformed or
 * repeated header is never a 500, and no tag earns a 304 for a resource the caller may not read.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { viaEdge } from '../helpers/edge-auth.ts';
import { startAdmin, type AdminHarness } from './harness.ts';

describe('administration If-None-Match and 304', () => {
  let h: AdminHarness;
  let ro: ReturnType<AdminHarness['as']>;
  let zonesTag: string;
  before(async () => {
    h = await startAdmin();
    ro = h.as('readonly');
    const got = await ro('GET', '/v1/reference/timezones');
    assert.equal(got.status, 200, got.text);
    assert.equal(got.headers['cache-control'], 'max-age=86400');
    zonesTag = got.headers.etag as string;
    assert.ok(zonesTag);
  });
  after(async () => h.close());

  it('answers 304 with the Cache-Control and ETag the 200 carries (RFC 9110 15.4.5)', async () => {
    const r = await ro('GET', '/v1/reference/timezones', { headers: { 'if-none-match': zonesTag } });
    assert.equal(r.status, 304);
    assert.equal(r.text, '');
    assert.equal(r.headers.etag, zonesTag);
    assert.equal(r.headers['cache-control'], 'max-age=86400', 'a cache keeps the lifetime it revalidated');
  });

  it('reads malformed tags as no match (200), never a 500', async () => {
    const opaque = zonesTag.slice(1, -1);
    for (const given of [
      `"${opaque}`, // unterminated
      `${opaque}"`,
      opaque, // unquoted
      'W/',
      'W/ ',
      ',,, ,',
      `"a,b"`,
      `W/W/${zonesTag}`,
      `"*"`,
      `${zonesTag.toLowerCase() === zonesTag ? zonesTag.toUpperCase() : zonesTag.toLowerCase()}`, // tags are case-sensitive
      `"${'x'.repeat(4000)}"`,
    ]) {
      const r = await ro('GET', '/v1/reference/timezones', { headers: { 'if-none-match': given } });
      assert.equal(r.status, 200, `${given.slice(0, 40)}: ${r.status}`);
    }
  });

  it('finds the tag in a long list and across repeated headers', async () => {
    const many = Array.from({ length: 500 }, (_, i) => `"t${i}"`).join(', ');
    const r = await ro('GET', '/v1/reference/timezones', {
      headers: { 'if-none-match': `${many}, ${zonesTag}` },
    });
    assert.equal(r.status, 304);
    const repeated = await new Promise<number>((resolve, reject) => {
      const req = request(
        `${h.origin}/v1/reference/timezones`,
        {
          headers: {
            ...viaEdge({
              'x-request-id': randomUUID(),
              'x-tenant-id': 'demo',
              'x-principal-id': 'staff-readonly',
              'x-roles': 'readonly',
            }),
            // Two header lines (node sends an array as such); the capitalised name is node's index type.
            'If-None-Match': ['"other"', `W/${zonesTag}`],
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.end();
    });
    assert.equal(repeated, 304, 'two If-None-Match lines are one list (RFC 9110 5.3)');
  });

  it("never answers 304 for another tenant's resource, nor to a caller without a reading role", async () => {
    const made = await h.as('admin')('POST', '/v1/configs', {
      json: { scope: 'TENANT', key: 'kyc.max_wallet', value: 50000 },
      headers: { 'idempotency-key': 'cfg-inm-00001' },
    });
    assert.equal(made.status, 201, made.text);
    const path = `/v1/configs/${made.json.id}`;
    const mine = await ro('GET', path);
    assert.equal(mine.status, 200, mine.text);
    const tag = mine.headers.etag as string;
    assert.equal((await ro('GET', path, { headers: { 'if-none-match': tag } })).status, 304);
    for (const given of [tag, '*']) {
      const theirs = await h.as('readonly', 'other')('GET', path, { headers: { 'if-none-match': given } });
      assert.equal(theirs.status, 404, `${given}: ${theirs.text}`);
      assert.equal(theirs.headers.etag, undefined);
      const roleless = await h.as('nobody')('GET', path, { headers: { 'if-none-match': given } });
      assert.equal(roleless.status, 403, `${given}: ${roleless.text}`);
      assert.equal(roleless.headers.etag, undefined);
    }
  });
});
