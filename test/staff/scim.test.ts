/**
 * SCIM 2.0 provisioning in core (issue 14 item 1): Users and Groups over HTTP with the identity
 * headers the edge sets for a SCIM credential, and every bad input of issue 14's SCIM list.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { staffUserById } from '../../core/staff/store.ts';
import { roleGroupId } from '../../core/staff/scim/groups.ts';
import { startStaffSession } from '../../core/staff/tokens.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { call, type Res } from '../helpers/http.ts';
import { viaEdge } from '../helpers/edge-auth.ts';

const userSchema = 'urn:ietf:params:scim:schemas:core:2.0:User';
const patchSchema = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const errorSchema = 'urn:ietf:params:scim:api:messages:2.0:Error';

describe('SCIM /scim/v2 in core', () => {
  let t: TestCore;
  const scimOf = (tenant: string, cred = 'c1') =>
    viaEdge({
      'x-tenant-id': tenant,
      'x-principal-id': `scim-credential:${cred}`,
      'x-roles': 'scim',
      'x-credential': 'scim-credential',
      'content-type': 'application/scim+json',
    });
  const h = scimOf('t1');
  const scim = (method: string, path: string, json?: unknown, headers: Record<string, string> = h) =>
    call(t.origin, method, `/scim/v2${path}`, { ...(json === undefined ? {} : { json }), headers });
  const user = (userName: string, extra: Record<string, unknown> = {}) => ({
    schemas: [userSchema],
    userName,
    ...extra,
  });
  const scimError = (r: Res, status: number, scimType?: string) => {
    assert.equal(r.status, status, r.text);
    assert.match(r.headers['content-type'] ?? '', /^application\/scim\+json/);
    assert.deepEqual(r.json.schemas, [errorSchema]);
    assert.equal(r.json.status, String(status));
    if (scimType) assert.equal(r.json.scimType, scimType, r.text);
  };

  before(async () => {
    t = await startTestCore();
    for (const id of ['t1', 't2'])
      await t.tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
  });
  after(() => t.close());

  it('creates a User with ETag and location, audited naming the SCIM credential', async () => {
    const r = await scim(
      'POST',
      '/Users',
      user('ada@example.org', {
        externalId: 'okta-1',
        displayName: 'Ada Lovelace',
        name: { givenName: 'Ada', familyName: 'Lovelace' },
        emails: [{ value: 'ada@example.org', type: 'work', primary: true }],
        password: 'never-stored-9',
      }),
    );
    assert.equal(r.status, 201, r.text);
    assert.match(r.headers['content-type'] ?? '', /^application\/scim\+json/);
    assert.equal(r.json.userName, 'ada@example.org');
    assert.equal(r.json.active, true);
    assert.equal(r.json.meta.resourceType, 'User');
    assert.equal(r.headers.etag, r.json.meta.version);
    assert.match(r.json.meta.version, /^W\/"1"$/);
    assert.equal(r.headers.location, r.json.meta.location);
    assert.equal(r.json.password, undefined);
    assert.doesNotMatch(
      JSON.stringify(await t.tdb.db.query('SELECT * FROM staff_users').then((x) => x.rows)),
      /never-stored-9/,
    );
    // Issue 16 item 1: the new member's passkey enrolment link, shown once to the provisioning client.
    const ext = 'urn:ietf:params:scim:schemas:extension:payments:2.0:Enrolment';
    assert.ok(r.json.schemas.includes(ext));
    assert.match(r.json[ext].enrolmentPath, /^\/staff#tenant=[a-z0-9-]+&enrol=enr_/);
    const { rows: links } = await t.tdb.db.query(
      'SELECT 1 FROM staff_enrolment_links WHERE user_id = $1 AND used_at IS NULL',
      [r.json.id],
    );
    assert.equal(links.length, 1);
    const got = await scim('GET', `/Users/${r.json.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.name.givenName, 'Ada');
    assert.equal(got.json[ext], undefined, 'the link is shown once, never again');
    const { rows } = await t.tdb.db.query<{ actor: { id: string }; action: string }>(
      `SELECT actor, action FROM audit_log WHERE target->>'id' = $1 ORDER BY id`,
      [r.json.id],
    );
    assert.deepEqual(
      rows.map((x) => [x.action, x.actor.id]),
      [
        ['staff.provision', 'scim-credential:c1'],
        ['staff.enrolment_link.create', 'scim-credential:c1'],
      ],
    );
  });

  it('refuses a duplicate userName (any case) with 409 uniqueness', async () => {
    await scim('POST', '/Users', user('dup@example.org'));
    scimError(await scim('POST', '/Users', user('DUP@example.org')), 409, 'uniqueness');
  });

  it('filters with eq, co, sw, pr, and/or on the listed attributes; a malformed filter is 400 invalidFilter', async () => {
    await scim(
      'POST',
      '/Users',
      user('bob@corp.test', {
        externalId: 'X-2',
        displayName: 'Bob Ops',
        emails: [{ value: 'bob@corp.test' }],
      }),
    );
    await scim('POST', '/Users', user('carol@corp.test', { displayName: 'Carol', active: false }));
    const names = async (filter: string) => {
      const r = await scim('GET', `/Users?filter=${encodeURIComponent(filter)}`);
      assert.equal(r.status, 200, `${filter}: ${r.text}`);
      return (r.json.Resources as { userName: string }[]).map((u) => u.userName).sort();
    };
    assert.deepEqual(await names('userName eq "BOB@corp.test"'), ['bob@corp.test']);
    assert.deepEqual(await names('userName co "corp"'), ['bob@corp.test', 'carol@corp.test']);
    assert.deepEqual(await names('userName sw "car"'), ['carol@corp.test']);
    assert.deepEqual(await names('externalId eq "X-2"'), ['bob@corp.test']);
    assert.deepEqual(await names('externalId eq "x-2"'), [], 'externalId is caseExact');
    assert.deepEqual(await names('active eq false'), ['carol@corp.test']);
    assert.deepEqual(await names('displayName pr and userName co "corp"'), [
      'bob@corp.test',
      'carol@corp.test',
    ]);
    assert.deepEqual(await names('emails.value eq "bob@corp.test" or displayName eq "carol"'), [
      'bob@corp.test',
      'carol@corp.test',
    ]);
    assert.deepEqual(await names('emails pr and not (userName sw "ada")'), ['bob@corp.test']);
    for (const bad of [
      'userName eq',
      'userName xx "a"',
      'userName eq "a',
      '(userName eq "a"',
      'nosuch eq "a"',
      'active eq "yes"',
      'userName eq "a" and',
      '"a" eq userName',
      'userName eq bare',
    ]) {
      scimError(await scim('GET', `/Users?filter=${encodeURIComponent(bad)}`), 400, 'invalidFilter');
    }
  });

  it('pages with startIndex and count; past the end is an empty page with the right total', async () => {
    const all = await scim('GET', '/Users');
    const total = all.json.totalResults as number;
    assert.ok(total >= 4);
    const page = await scim('GET', '/Users?startIndex=2&count=2');
    assert.equal(page.json.totalResults, total);
    assert.equal(page.json.startIndex, 2);
    assert.equal(page.json.itemsPerPage, 2);
    assert.equal(page.json.Resources[0].id, all.json.Resources[1].id);
    const past = await scim('GET', `/Users?startIndex=${total + 5}&count=10`);
    assert.equal(past.status, 200);
    assert.equal(past.json.totalResults, total);
    assert.deepEqual(past.json.Resources, []);
    assert.equal((await scim('GET', '/Users?count=0')).json.Resources.length, 0);
    scimError(await scim('GET', '/Users?startIndex=abc'), 400);
  });

  it('returns only the attributes asked for, or all but the excluded ones; POST /Users/.search queries in the body', async () => {
    const made = await scim(
      'POST',
      '/Users',
      user('proj@example.org', {
        displayName: 'Pro J',
        name: { givenName: 'Pro', familyName: 'J' },
        title: 'T',
      }),
    );
    const only = await scim('GET', `/Users/${made.json.id}?attributes=userName,name.givenName`);
    assert.deepEqual(only.json, {
      schemas: [userSchema],
      id: made.json.id,
      userName: 'proj@example.org',
      name: { givenName: 'Pro' },
    });
    const without = await scim('GET', `/Users/${made.json.id}?excludedAttributes=name,title,id`);
    assert.equal(without.json.name, undefined);
    assert.equal(without.json.title, undefined);
    assert.equal(without.json.id, made.json.id, 'id is always returned');
    assert.equal(without.json.displayName, 'Pro J');
    const search = await scim('POST', '/Users/.search', {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:SearchRequest'],
      filter: 'userName eq "proj@example.org"',
      attributes: ['displayName'],
    });
    assert.equal(search.status, 200, search.text);
    assert.deepEqual(search.json.Resources, [
      { schemas: [userSchema], id: made.json.id, displayName: 'Pro J' },
    ]);
    scimError(
      await scim('POST', '/Users/.search', {
        schemas: ['urn:ietf:params:scim:api:messages:2.0:SearchRequest'],
        filter: 'userName eq',
      }),
      400,
      'invalidFilter',
    );
  });

  it('PUT replaces, honours If-Match (412 when stale) and refuses another id (mutability)', async () => {
    const made = await scim('POST', '/Users', user('put@example.org', { title: 'Clerk' }));
    const put = await scim(
      'PUT',
      `/Users/${made.json.id}`,
      user('put@example.org', { displayName: 'Put Person' }),
      { ...h, 'if-match': made.json.meta.version },
    );
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.displayName, 'Put Person');
    assert.equal(put.json.title, undefined, 'PUT replaces: attributes not sent are gone');
    assert.equal(put.json.meta.version, 'W/"2"');
    // If-None-Match compares weakly (RFC 9110 13.1.2): the tag with or without W/, or in a list.
    for (const given of ['W/"2"', '"2"', '"1", W/"2"', '*'])
      assert.equal(
        (await scim('GET', `/Users/${made.json.id}`, undefined, { ...h, 'if-none-match': given })).status,
        304,
        given,
      );
    assert.equal(
      (await scim('GET', `/Users/${made.json.id}`, undefined, { ...h, 'if-none-match': 'W/"1"' })).status,
      200,
    );
    scimError(
      await scim('PUT', `/Users/${made.json.id}`, user('put@example.org'), {
        ...h,
        'if-match': made.json.meta.version,
      }),
      412,
    );
    scimError(
      await scim(
        'PUT',
        `/Users/${made.json.id}`,
        user('put@example.org', { id: '00000000-0000-4000-8000-000000000000' }),
      ),
      400,
      'mutability',
    );
    scimError(await scim('PUT', '/Users/00000000-0000-4000-8000-000000000000', user('x@example.org')), 404);
  });

  it('PATCH adds, replaces and removes with and without a path; id and meta are immutable', async () => {
    const made = await scim(
      'POST',
      '/Users',
      user('patch@example.org', {
        emails: [
          { value: 'a@example.org', type: 'work' },
          { value: 'b@example.org', type: 'home' },
        ],
      }),
    );
    const id = made.json.id as string;
    const patch = (ops: unknown[], headers = h) =>
      scim('PATCH', `/Users/${id}`, { schemas: [patchSchema], Operations: ops }, headers);
    let r = await patch([
      { op: 'add', path: 'title', value: 'Lead' },
      { op: 'replace', value: { displayName: 'Pat', 'name.givenName': 'Pat' } },
      { op: 'replace', path: 'emails[type eq "work"].value', value: 'c@example.org' },
      { op: 'remove', path: 'emails[type eq "home"]' },
      {
        op: 'add',
        path: 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department',
        value: 'Ops',
      },
    ]);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.title, 'Lead');
    assert.equal(r.json.displayName, 'Pat');
    assert.deepEqual(r.json.emails, [{ value: 'c@example.org', type: 'work' }]);
    assert.equal(r.json['urn:ietf:params:scim:schemas:extension:enterprise:2.0:User'].department, 'Ops');
    r = await patch([{ op: 'remove', path: 'title' }]);
    assert.equal(r.json.title, undefined);
    for (const op of [
      { op: 'replace', path: 'id', value: 'x' },
      { op: 'replace', path: 'meta.created', value: 'x' },
      { op: 'replace', value: { id: 'x' } },
      { op: 'add', path: 'meta', value: {} },
    ]) {
      scimError(await patch([op]), 400, 'mutability');
    }
    scimError(await patch([{ op: 'remove' }]), 400, 'noTarget');
    scimError(await patch([{ op: 'move', path: 'title', value: 'x' }]), 400, 'invalidSyntax');
    scimError(
      await scim('PATCH', `/Users/${id}`, {
        schemas: [userSchema],
        Operations: [{ op: 'add', path: 'title', value: 'x' }],
      }),
      400,
      'invalidSyntax',
    );
    scimError(await patch([{ op: 'add', path: 'title', value: 'x' }], { ...h, 'if-match': 'W/"1"' }), 412);
  });

  it('refuses an unknown schema URN and a malformed body', async () => {
    scimError(
      await scim('POST', '/Users', { schemas: [userSchema, 'urn:example:unknown:1.0:User'], userName: 'u1' }),
      400,
      'invalidSyntax',
    );
    scimError(
      await scim('POST', '/Users', { schemas: ['urn:example:unknown:1.0:User'], userName: 'u2' }),
      400,
      'invalidSyntax',
    );
    scimError(
      await scim('POST', '/Users', {
        schemas: [userSchema],
        userName: 'u3',
        'urn:example:ext:1.0': { a: 1 },
      }),
      400,
      'invalidSyntax',
    );
    scimError(await scim('POST', '/Users', { schemas: [userSchema] }), 400, 'invalidValue');
    scimError(await scim('POST', '/Users', { schemas: [userSchema], userName: 42 }), 400, 'invalidValue');
    const raw = await call(t.origin, 'POST', '/scim/v2/Users', { body: '{"schemas":', headers: h });
    scimError(raw, 400, 'invalidSyntax');
  });

  it("deactivating revokes the member's sessions in the same transaction and NOTIFYs the edges", async () => {
    const made = await scim('POST', '/Users', user('leaver@example.org'));
    const s = await startStaffSession(
      t.tdb.db,
      t.keys,
      { tenantId: 't1', userId: made.json.id, aal: 2, amr: ['hwk'], ip: undefined, method: 'passkey' },
      Date.now(),
    );
    const listener = new pg.Client({
      connectionString: (t.tdb.db.pool.options as { connectionString?: string }).connectionString,
    });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query('LISTEN sessions_changed');
    try {
      const r = await scim('PATCH', `/Users/${made.json.id}`, {
        schemas: [patchSchema],
        Operations: [{ op: 'replace', value: { active: false } }],
      });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.active, false);
      const { rows } = await t.tdb.db.query<{ revoked_at: Date | null; revoke_reason: string }>(
        'SELECT revoked_at, revoke_reason FROM sessions WHERE id = $1',
        [s.sessionId],
      );
      assert.ok(rows[0]?.revoked_at, 'session revoked');
      assert.equal(rows[0]?.revoke_reason, 'scim_deactivated');
      await listener.query('SELECT 1');
      assert.ok(
        heard.some((p) => p.includes(s.sessionId)),
        'sessions_changed announced the revoked session',
      );
      const audit = await t.tdb.db.query<{ action: string; actor: { id: string } }>(
        `SELECT action, actor FROM audit_log WHERE target->>'id' = $1 ORDER BY id`,
        [made.json.id],
      );
      assert.ok(
        audit.rows.some((a) => a.action === 'staff.deprovision' && a.actor.id === 'scim-credential:c1'),
      );
    } finally {
      await listener.end();
    }
  });

  it('DELETE answers 204, keeps a tombstone (GET 404, staffUserById resolves), revokes sessions, frees the userName', async () => {
    const made = await scim('POST', '/Users', user('gone@example.org'));
    const s = await startStaffSession(
      t.tdb.db,
      t.keys,
      { tenantId: 't1', userId: made.json.id, aal: 1, amr: ['fed'], ip: undefined, method: 'federation' },
      Date.now(),
    );
    assert.equal((await scim('DELETE', `/Users/${made.json.id}`)).status, 204);
    scimError(await scim('GET', `/Users/${made.json.id}`), 404);
    scimError(await scim('DELETE', `/Users/${made.json.id}`), 404);
    const tomb = await staffUserById(t.tdb.db, 't1', made.json.id);
    assert.equal(tomb?.userName, 'gone@example.org');
    assert.ok(tomb?.deletedAt);
    const { rows } = await t.tdb.db.query<{ revoked_at: Date | null }>(
      'SELECT revoked_at FROM sessions WHERE id = $1',
      [s.sessionId],
    );
    assert.ok(rows[0]?.revoked_at);
    assert.equal((await scim('POST', '/Users', user('gone@example.org'))).status, 201);
  });

  it('serves the seven role groups with stable ids; PATCH and PUT of members change roles', async () => {
    const list = await scim('GET', '/Groups');
    assert.equal(list.json.totalResults, 7);
    assert.deepEqual(
      (list.json.Resources as { displayName: string }[]).map((g) => g.displayName).sort(),
      ['Admin', 'Ops', 'PolicyAuthor', 'ReadOnly', 'compliance', 'fraud', 'support'].sort(),
    );
    const adminId = roleGroupId('t1', 'admin');
    assert.ok((list.json.Resources as { id: string }[]).some((g) => g.id === adminId));
    const u = await scim('POST', '/Users', user('grace@example.org'));
    const add = await scim('PATCH', `/Groups/${adminId}`, {
      schemas: [patchSchema],
      Operations: [{ op: 'add', path: 'members', value: [{ value: u.json.id }] }],
    });
    assert.equal(add.status, 200, add.text);
    assert.deepEqual((await staffUserById(t.tdb.db, 't1', u.json.id))?.roles, ['admin']);
    const again = await scim('GET', `/Users/${u.json.id}`);
    assert.deepEqual(
      again.json.groups.map((g: { display: string }) => g.display),
      ['Admin'],
    );
    const opsId = roleGroupId('t1', 'ops');
    const put = await scim('PUT', `/Groups/${opsId}`, {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      displayName: 'Ops',
      members: [{ value: u.json.id }],
    });
    assert.equal(put.status, 200, put.text);
    const rm = await scim('PATCH', `/Groups/${adminId}`, {
      schemas: [patchSchema],
      Operations: [{ op: 'remove', path: `members[value eq "${u.json.id}"]` }],
    });
    assert.equal(rm.status, 200, rm.text);
    assert.deepEqual((await staffUserById(t.tdb.db, 't1', u.json.id))?.roles, ['ops']);
    scimError(
      await scim('PATCH', `/Groups/${adminId}`, {
        schemas: [patchSchema],
        Operations: [{ op: 'replace', path: 'displayName', value: 'Root' }],
      }),
      400,
      'mutability',
    );
    scimError(
      await scim('PATCH', `/Groups/${adminId}`, {
        schemas: [patchSchema],
        Operations: [
          { op: 'add', path: 'members', value: [{ value: '00000000-0000-4000-8000-000000000000' }] },
        ],
      }),
      400,
      'invalidValue',
    );
    scimError(await scim('DELETE', `/Groups/${adminId}`), 400, 'mutability');
    const byName = await scim('GET', `/Groups?filter=${encodeURIComponent('displayName eq "Admin"')}`);
    assert.equal(byName.json.Resources[0].id, adminId);
  });

  it('maps identity-provider group names through the tenant mapping: POST links a mapped name, refuses others', async () => {
    await t.tdb.db.query(
      `INSERT INTO staff_group_mappings (tenant_id, idp_group, role) VALUES ('t1', 'payments-support', 'support')`,
    );
    const u = await scim('POST', '/Users', user('sam@example.org'));
    const linked = await scim('POST', '/Groups', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      displayName: 'payments-support',
      members: [{ value: u.json.id }],
    });
    assert.equal(linked.status, 201, linked.text);
    assert.equal(linked.json.id, roleGroupId('t1', 'support'));
    assert.deepEqual((await staffUserById(t.tdb.db, 't1', u.json.id))?.roles, ['support']);
    const found = await scim(
      'GET',
      `/Groups?filter=${encodeURIComponent('displayName eq "payments-support"')}`,
    );
    assert.equal(found.json.Resources[0].id, roleGroupId('t1', 'support'));
    scimError(
      await scim('POST', '/Groups', {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
        displayName: 'unmapped',
      }),
      400,
      'invalidValue',
    );
    scimError(
      await scim('POST', '/Groups', {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
        displayName: 'Admin',
      }),
      409,
      'uniqueness',
    );
  });

  it("keeps tenants apart: another tenant's credential sees and changes none of these users", async () => {
    const mine = await scim('POST', '/Users', user('own@example.org'));
    const other = scimOf('t2', 'c2');
    assert.equal((await scim('GET', '/Users', undefined, other)).json.totalResults, 0);
    scimError(await scim('GET', `/Users/${mine.json.id}`, undefined, other), 404);
    scimError(
      await scim(
        'PATCH',
        `/Users/${mine.json.id}`,
        { schemas: [patchSchema], Operations: [{ op: 'replace', value: { active: false } }] },
        other,
      ),
      404,
    );
    scimError(await scim('DELETE', `/Users/${mine.json.id}`, undefined, other), 404);
    scimError(
      await scim(
        'PATCH',
        `/Groups/${roleGroupId('t2', 'admin')}`,
        {
          schemas: [patchSchema],
          Operations: [{ op: 'add', path: 'members', value: [{ value: mine.json.id }] }],
        },
        other,
      ),
      400,
      'invalidValue',
    );
    assert.equal((await scim('GET', `/Users/${mine.json.id}`)).json.active, true);
    // The same userName may exist in another tenant.
    assert.equal((await scim('POST', '/Users', user('own@example.org'), other)).status, 201);
  });

  it('serves ServiceProviderConfig, ResourceTypes and Schemas, and refuses callers without a SCIM credential', async () => {
    const sp = await scim('GET', '/ServiceProviderConfig');
    assert.equal(sp.json.patch.supported, true);
    assert.equal(sp.json.etag.supported, true);
    assert.equal((await scim('GET', '/ResourceTypes')).json.totalResults, 2);
    assert.equal((await scim('GET', '/ResourceTypes/User')).json.endpoint, '/Users');
    assert.equal((await scim('GET', `/Schemas/${userSchema}`)).json.id, userSchema);
    scimError(await scim('GET', '/Schemas/urn:nope'), 404);
    const staff = viaEdge({
      'x-tenant-id': 't1',
      'x-principal-id': 'service-token:x',
      'x-roles': 'admin',
      'x-credential': 'service-token',
    });
    scimError(await scim('GET', '/Users', undefined, staff), 401);
    scimError(
      await call(t.origin, 'GET', '/scim/v2/Users', {
        headers: {
          'x-tenant-id': 't1',
          'x-roles': 'scim',
          'x-credential': 'scim-credential',
          'x-principal-id': 'scim-credential:forged',
        },
      }),
      401,
    );
  });
});
