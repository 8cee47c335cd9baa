/**
 * SCIM If-None-Match on GET /Users/{id} and /Groups/{id} (RFC 7644 3.14, RFC 9110 13.1.2): a 304
 * only while the representation the client holds is still current, and never for another
 * tenant's resource.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { roleGroupId } from '../../core/staff/scim/groups.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { call } from '../helpers/http.ts';

const userSchema = 'urn:ietf:params:scim:schemas:core:2.0:User';
const patchSchema = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

describe('SCIM conditional GET', () => {
  let t: TestCore;
  const scimOf = (tenant: string) =>
    viaEdge({
      'x-tenant-id': tenant,
      'x-principal-id': 'scim-credential:c1',
      'x-roles': 'scim',
      'x-credential': 'scim-credential',
      'content-type': 'application/scim+json',
    });
  const scim = (
    method: string,
    path: string,
    json?: unknown,
    extra: Record<string, string> = {},
    tenant = 't1',
  ) =>
    call(t.origin, method, `/scim/v2${path}`, {
      ...(json === undefined ? {} : { json }),
      headers: { ...scimOf(tenant), ...extra },
    });

  before(async () => {
    t = await startTestCore();
    await t.tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('t1', 't1', 'KE', 'KES'), ('t2', 't2', 'KE', 'KES')`,
    );
  });
  after(() => t.close());

  // A member's roles are its `groups`: granting one bumps its version (migration 1080).
  it("a User's ETag changes when a group change gives it a role: no 304 for the copy without it", async () => {
    const made = await scim('POST', '/Users', { schemas: [userSchema], userName: 'etag-groups@example.org' });
    assert.equal(made.status, 201, made.text);
    const before = await scim('GET', `/Users/${made.json.id}`);
    const held = before.headers.etag as string;
    assert.deepEqual(before.json.groups ?? [], []);
    assert.equal(
      (await scim('GET', `/Users/${made.json.id}`, undefined, { 'if-none-match': held })).status,
      304,
    );
    const add = await scim('PATCH', `/Groups/${roleGroupId('t1', 'admin')}`, {
      schemas: [patchSchema],
      Operations: [{ op: 'add', path: 'members', value: [{ value: made.json.id }] }],
    });
    assert.equal(add.status, 200, add.text);
    const after = await scim('GET', `/Users/${made.json.id}`, undefined, { 'if-none-match': held });
    assert.equal(after.status, 200, 'the User now lists the Admin group: the held copy is stale');
    assert.deepEqual(
      after.json.groups.map((g: { display: string }) => g.display),
      ['Admin'],
    );
    assert.notEqual(after.headers.etag, held);
    assert.equal(after.headers.etag, after.json.meta.version);
  });

  const grant = (userId: string, role: 'ops' | 'fraud', op: 'add' | 'remove' = 'add') =>
    scim('PATCH', `/Groups/${roleGroupId('t1', role)}`, {
      schemas: [patchSchema],
      Operations: [
        op === 'add'
          ? { op, path: 'members', value: [{ value: userId }] }
          : { op, path: `members[value eq "${userId}"]` },
      ],
    });

  it('refuses 412 a PUT or DELETE naming the tag from before a role change, and takes the new one', async () => {
    const made = await scim('POST', '/Users', {
      schemas: [userSchema],
      userName: 'etag-ifmatch@example.org',
    });
    assert.equal(made.status, 201, made.text);
    const held = made.headers.etag as string;
    assert.equal((await grant(made.json.id, 'ops')).status, 200);
    const body = { schemas: [userSchema], userName: 'etag-ifmatch@example.org', displayName: 'Renamed' };
    const stale = await scim('PUT', `/Users/${made.json.id}`, body, { 'if-match': held });
    assert.equal(stale.status, 412, stale.text);
    assert.equal(
      (await scim('DELETE', `/Users/${made.json.id}`, undefined, { 'if-match': held })).status,
      412,
    );
    const now = await scim('GET', `/Users/${made.json.id}`);
    const put = await scim('PUT', `/Users/${made.json.id}`, body, { 'if-match': now.headers.etag as string });
    assert.equal(put.status, 200, put.text);
    const read = await scim('GET', `/Users/${made.json.id}`);
    assert.equal(put.headers.etag, read.headers.etag, 'the PUT answers the tag a following GET shows');
    assert.equal(read.json.displayName, 'Renamed');
    // Taking the role changes the tag again: the copy listing Ops is stale.
    assert.equal((await grant(made.json.id, 'ops', 'remove')).status, 200);
    const taken = await scim('GET', `/Users/${made.json.id}`, undefined, {
      'if-none-match': read.headers.etag as string,
    });
    assert.equal(taken.status, 200);
    assert.deepEqual(taken.json.groups ?? [], []);
  });

  // A role change moves meta.lastModified with meta.version (migration 1081), so a client syncing by
  // `filter=meta.lastModified gt "<last sync>"` (RFC 7644 3.4.2.2) sees the member again.
  it('lists a User whose groups changed since a time under meta.lastModified gt', async () => {
    const made = await scim('POST', '/Users', { schemas: [userSchema], userName: 'etag-sync@example.org' });
    assert.equal(made.status, 201, made.text);
    const since = made.json.meta.lastModified as string;
    assert.equal((await grant(made.json.id, 'fraud')).status, 200);
    const after = await scim('GET', `/Users/${made.json.id}`);
    assert.notEqual(after.headers.etag, made.headers.etag);
    const filter = encodeURIComponent(`meta.lastModified gt "${since}"`);
    const listed = await scim('GET', `/Users?filter=${filter}`);
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(
      listed.json.Resources.map((u: { id: string }) => u.id),
      [made.json.id],
    );
  });

  it("answers another tenant's User 404 whatever tag it names, never 304", async () => {
    const made = await scim('POST', '/Users', { schemas: [userSchema], userName: 'elsewhere@example.org' });
    assert.equal(made.status, 201, made.text);
    for (const given of ['*', made.headers.etag as string, '"1"']) {
      const r = await scim('GET', `/Users/${made.json.id}`, undefined, { 'if-none-match': given }, 't2');
      assert.equal(r.status, 404, `${given}: ${r.text}`);
      assert.equal(r.headers.etag, undefined);
    }
    assert.equal(
      (await scim('GET', `/Users/${made.json.id}`, undefined, { 'if-none-match': '"1"' })).status,
      304,
      'its own tenant is told 304',
    );
  });

  const groupOf = (role: 'ops' | 'fraud' | 'compliance', tenant = 't1') =>
    `/Groups/${roleGroupId(tenant, role)}`;
  const getGroup = (path: string, tag?: string, tenant = 't1') =>
    scim('GET', path, undefined, tag === undefined ? {} : { 'if-none-match': tag }, tenant);

  it("answers 304 with the Group's ETag when If-None-Match names it (weakly, in a list, or *)", async () => {
    const path = groupOf('compliance');
    const first = await getGroup(path);
    assert.equal(first.status, 200, first.text);
    const held = first.headers.etag as string;
    assert.match(held, /^W\/".+"$/);
    assert.equal(held, first.json.meta.version);
    for (const given of [held, held.slice(2), `"other", ${held}`, '*']) {
      const r = await getGroup(path, given);
      assert.equal(r.status, 304, `${given}: ${r.text}`);
      assert.equal(r.headers.etag, held, 'a 304 carries the ETag the 200 would have');
      assert.equal(r.text, '', 'a 304 has no body');
    }
    const other = await getGroup(path, 'W/"not-this-one"');
    assert.equal(other.status, 200);
    assert.equal(other.headers.etag, held);
  });

  it("changes a Group's ETag with its members: no 304 for the copy from before", async () => {
    const path = groupOf('ops');
    const held = (await getGroup(path)).headers.etag as string;
    const made = await scim('POST', '/Users', { schemas: [userSchema], userName: 'group-etag@example.org' });
    assert.equal(made.status, 201, made.text);
    assert.equal((await grant(made.json.id, 'ops')).status, 200);
    const added = await getGroup(path, held);
    assert.equal(added.status, 200, 'the Group now lists the new member');
    assert.ok(added.json.members.some((m: { value: string }) => m.value === made.json.id));
    assert.notEqual(added.headers.etag, held);
    assert.equal((await getGroup(path, added.headers.etag as string)).status, 304);
    assert.equal((await grant(made.json.id, 'ops', 'remove')).status, 200);
    const removed = await getGroup(path, added.headers.etag as string);
    assert.equal(removed.status, 200, 'the member is gone again');
    assert.notEqual(removed.headers.etag, added.headers.etag);
  });

  // A Group lists each member's userName as `display`: renaming a member changes the Group.
  it("changes a Group's ETag when a member's userName changes", async () => {
    const path = groupOf('fraud');
    const made = await scim('POST', '/Users', {
      schemas: [userSchema],
      userName: 'before-rename@example.org',
    });
    assert.equal(made.status, 201, made.text);
    assert.equal((await grant(made.json.id, 'fraud')).status, 200);
    const held = (await getGroup(path)).headers.etag as string;
    const put = await scim('PUT', `/Users/${made.json.id}`, {
      schemas: [userSchema],
      userName: 'after-rename@example.org',
    });
    assert.equal(put.status, 200, put.text);
    const after = await getGroup(path, held);
    assert.equal(after.status, 200, 'the held copy shows the old userName');
    assert.deepEqual(
      after.json.members
        .filter((m: { value: string }) => m.value === made.json.id)
        .map((m: { display: string }) => m.display),
      ['after-rename@example.org'],
    );
    assert.notEqual(after.headers.etag, held);
    // A write naming the tag from before the rename is refused: it did not see the current Group.
    const stale = await scim(
      'PATCH',
      path,
      { schemas: [patchSchema], Operations: [{ op: 'remove', path: `members[value eq "${made.json.id}"]` }] },
      { 'if-match': held },
    );
    assert.equal(stale.status, 412, stale.text);
  });

  it("answers another tenant's Group 404 whatever tag it names, never 304", async () => {
    const held = (await getGroup(groupOf('ops'))).headers.etag as string;
    for (const given of ['*', held]) {
      const r = await getGroup(groupOf('ops'), given, 't2');
      assert.equal(r.status, 404, `${given}: ${r.text}`);
      assert.equal(r.headers.etag, undefined);
    }
  });
});
