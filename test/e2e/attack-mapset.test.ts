/**
 * Attacks on the set-based group-mapping change and its ETag (issue 16) through the dev gateway:
 * If-Match in every form a client may send it, an Idempotency-Key reused after a 412, another
 * tenant's version and members, malformed bodies, a role SCIM asserted while the sign-in held it,
 * a PUT racing a sign-in and a SCIM write, and the edge refusing the role of every member at once.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { etagOf as etagOfBody } from '../../core/admin/http.ts';
import { roleGroupId } from '../../core/staff/scim/groups.ts';
import type { StaffRole } from '../../core/staff/store.ts';
import { asBearer } from '../helpers/gateway.ts';
import { call, eventually, type Res } from '../helpers/http.ts';
import { addStaff, addTenant } from '../staff/fixtures.ts';
import { federatedSignIn } from '../staff/idp.ts';
import { type MappingStack, rolesOf as tenantRolesOf, startMappingStack } from '../staff/mapping-stack.ts';

const patchOp = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const path = '/v1/staff/group-mappings';
type Items = { idp_group: string; role: string }[];

describe('attacks on group-mapping versions and set-based removals', () => {
  let setup: MappingStack | undefined;
  const get = () => setup ?? assert.fail('the stack did not start');
  const db = () => get().e2e.tdb.db;
  const as = asBearer(() => get().e2e.gw);
  const read = () => as(get().serviceAdmin, 'GET', path);
  const put = (items: Items, headers: Record<string, string> = {}) =>
    as(get().serviceAdmin, 'PUT', path, {
      json: { items },
      headers: { 'idempotency-key': randomUUID(), ...headers },
    });
  const etag = (r: Res): string => r.headers.etag ?? assert.fail(`no ETag: ${r.status} ${r.text}`);
  const rolesOf = (tenantId: string, id: string) => tenantRolesOf(db(), tenantId, id);
  /** SCIM adds `id` to the role's group. */
  const scimAdd = (role: StaffRole, id: string) =>
    as(get().scimToken, 'PATCH', `/scim/v2/Groups/${roleGroupId('demo', role)}`, {
      json: { schemas: [patchOp], Operations: [{ op: 'add', path: 'members', value: [{ value: id }] }] },
      headers: { 'content-type': 'application/scim+json' },
    });
  /** A member signed in through the provider with `groups`; their sign-in's answer. */
  async function federated(name: string, groups: string[]): Promise<{ id: string; signedIn: Res }> {
    const { e2e, idp } = get();
    const id = await addStaff(db(), 'demo', `${name}@demo.example`, [], `sub-${name}`);
    const signedIn = await federatedSignIn(e2e.gw, idp, {
      sub: `sub-${name}`,
      preferred_username: `${name}@demo.example`,
      groups,
    });
    assert.equal(signedIn.status, 200, signedIn.text);
    return { id, signedIn };
  }

  before(async () => {
    setup = await startMappingStack('attack-mapset');
  });
  after(async () => {
    await setup?.stop();
  });

  it('after a 412, the same Idempotency-Key sent with the version read since is 409, not the stored 412 replayed', async () => {
    assert.equal((await put([{ idp_group: 'idem-a', role: 'ops' }])).status, 200);
    const stale = etag(await read());
    assert.equal((await put([{ idp_group: 'idem-b', role: 'ops' }])).status, 200);
    const key = randomUUID();
    const wanted = [{ idp_group: 'idem-c', role: 'fraud' }];
    const refused = await put(wanted, { 'idempotency-key': key, 'if-match': stale });
    assert.equal(refused.status, 412, refused.text);
    // The client does as told (GET it again) and retries its write, same key, fresh version.
    const fresh = etag(await read());
    const retried = await put(wanted, { 'idempotency-key': key, 'if-match': fresh });
    // Another request under a used key (core/admin/http.ts hashedRequest), never the first
    // answer replayed: that was for a request that did nothing.
    assert.equal(retried.status, 409, retried.text);
    assert.equal(retried.json.code, 'IDEMPOTENCY_CONFLICT');
    // A new key with the version read since is applied.
    const applied = await put(wanted, { 'if-match': fresh });
    assert.equal(applied.status, 200, applied.text);
    assert.deepEqual(applied.json.items, wanted);
    // The same key with the same stale version still replays its 412.
    const replay = await put(wanted, { 'idempotency-key': key, 'if-match': stale });
    assert.equal(replay.status, 412, replay.text);
  });

  it('If-Match: a list naming the current version matches; weak, unquoted, stale-only or garbage tags are 412, never 500', async () => {
    assert.equal((await put([{ idp_group: 'forms', role: 'ops' }])).status, 200);
    const current = etag(await read());
    const statusWith = async (ifMatch: string) =>
      (await put([{ idp_group: 'forms', role: 'ops' }], { 'if-match': ifMatch })).status;
    assert.equal(await statusWith(`"nope", ${current}`), 200);
    assert.equal(await statusWith(`${current},"nope"`), 200);
    assert.equal(await statusWith(current.slice(1, -1)), 412, 'an unquoted value is no entity-tag');
    assert.equal(await statusWith(`"${current}"`), 412);
    assert.equal(await statusWith('"nope"'), 412);
    assert.equal(await statusWith(', ,,'), 412);
    assert.equal(await statusWith(`${current.slice(0, -2)}"`), 412);
    assert.equal(await statusWith(`"${'x'.repeat(4000)}"`), 412);
    assert.equal(await statusWith('"*"'), 412, 'a quoted star is an entity-tag, not any');
    // RFC 9110 13.1.1: If-Match compares strongly; a weak tag never matches.
    assert.equal(await statusWith(`W/${current}`), 412, 'a weak tag is no match for If-Match');
    assert.equal(await statusWith(`"nope", W/${current}`), 412);
    assert.equal(await statusWith(`W/"nope", ${current}`), 200);
  });

  it("another tenant's version matches nothing here unless the mapping is the same, and its members keep their roles", async () => {
    await addTenant(db(), 'mapsetother');
    const otherItems = [{ idp_group: 'shared-name', role: 'admin' }];
    await db().query(
      `INSERT INTO staff_group_mappings (tenant_id, idp_group, role) VALUES ('mapsetother', 'shared-name', 'admin')`,
    );
    const stranger = await addStaff(db(), 'mapsetother', 'stranger@other.example', ['admin']);
    await db().query(
      `UPDATE staff_users SET idp_groups = '{shared-name}', idp_roles = '{admin}' WHERE tenant_id = 'mapsetother' AND id = $1`,
      [stranger],
    );
    // What the other tenant's GET answers as its ETag.
    const theirs = etagOfBody({ items: otherItems });
    assert.equal((await put([{ idp_group: 'shared-name', role: 'ops' }])).status, 200);
    const { id: mine } = await federated('shared-member', ['shared-name']);
    assert.deepEqual(await rolesOf('demo', mine), ['ops']);
    const crossed = await put([], { 'if-match': theirs });
    assert.equal(crossed.status, 412, crossed.text);
    assert.deepEqual(await rolesOf('demo', mine), ['ops']);

    const ok = await put([], { 'if-match': etag(await read()) });
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(await rolesOf('demo', mine), []);
    assert.deepEqual(
      await rolesOf('mapsetother', stranger),
      ['admin'],
      "another tenant's member keeps the role",
    );
    const { rows } = await db().query<{ idp_roles: string[]; n: string }>(
      `SELECT u.idp_roles, (SELECT count(*) FROM audit_log a WHERE a.tenant_id = 'mapsetother' AND a.action = 'staff.role_remove') AS n
         FROM staff_users u WHERE u.tenant_id = 'mapsetother' AND u.id = $1`,
      [stranger],
    );
    assert.deepEqual(rows[0], { idp_roles: ['admin'], n: '0' });
  });

  it('a replayed PUT answers the ETag its first answer carried', async () => {
    const key = randomUUID();
    const first = await put([{ idp_group: 'replayed', role: 'ops' }], { 'idempotency-key': key });
    assert.equal(first.status, 200, first.text);
    const again = await put([{ idp_group: 'replayed', role: 'ops' }], { 'idempotency-key': key });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.headers.etag, etag(first));
  });

  it('malformed bodies and callers other than an Admin are refused with a clear code, never a 500', async () => {
    const { serviceAdmin, scimToken, e2e } = get();
    const before = etag(await read());
    const bodies: unknown[] = [
      {},
      null,
      [],
      'items',
      { items: {} },
      { items: [null] },
      { items: [{ idp_group: 'a\u0000b', role: 'ops' }] },
      { items: [{ idp_group: 'a\ud800b', role: 'ops' }] },
      { items: [{ idp_group: '', role: 'ops' }] },
      { items: [{ idp_group: 'x'.repeat(257), role: 'ops' }] },
      { items: [{ idp_group: 'a', role: 'root' }] },
      { items: [{ idp_group: 'a', role: 'Admin' }] },
      { items: [{ idp_group: 7, role: 'ops' }] },
      { items: [{ idp_group: 'a', role: 'ops', extra: 1 }] },
      { items: [], extra: 1 },
      { items: Array.from({ length: 501 }, (_, i) => ({ idp_group: `g${i}`, role: 'ops' })) },
      JSON.parse('{"items":[{"idp_group":"a","role":"ops","__proto__":{"role":"admin"}}]}'),
    ];
    for (const json of bodies) {
      const r = await as(serviceAdmin, 'PUT', path, { json, headers: { 'idempotency-key': randomUUID() } });
      assert.ok(
        r.status >= 400 && r.status < 500,
        `${JSON.stringify(json)?.slice(0, 80)}: ${r.status} ${r.text}`,
      );
      assert.doesNotMatch(r.text, /\bat .*\.ts:\d+|stack/i);
    }
    for (const text of ['{"items": [', '', 'null', '{"items":[]}{}']) {
      const r = await call(e2e.gw, 'PUT', path, {
        body: text,
        headers: {
          authorization: `Bearer ${serviceAdmin}`,
          'content-type': 'application/json',
          'x-request-id': randomUUID(),
          'idempotency-key': randomUUID(),
        },
      });
      assert.ok(r.status >= 400 && r.status < 500, `${JSON.stringify(text)}: ${r.status} ${r.text}`);
    }
    const scim = await as(scimToken, 'PUT', path, {
      json: { items: [] },
      headers: { 'idempotency-key': randomUUID() },
    });
    assert.ok(scim.status === 401 || scim.status === 403, `the SCIM credential: ${scim.status} ${scim.text}`);
    assert.equal(etag(await read()), before, 'nothing changed');
  });

  // A SCIM add of a member already holding the role changes no row; the role still becomes SCIM's
  // (core/staff/scim/groups.ts setMembers), so the mapping's removal leaves it.
  it('a role SCIM asserts while the sign-in holds it is kept when the mapping goes; the sign-in alone loses it', async () => {
    assert.equal((await put([{ idp_group: 'dual', role: 'compliance' }])).status, 200);
    const { id: both } = await federated('dual-both', ['dual']);
    const { id: signInOnly } = await federated('dual-signin', ['dual']);
    assert.deepEqual(await rolesOf('demo', both), ['compliance']);
    // The provisioning client adds the member to the role's group too (a no-op for the roles row).
    const scim = await scimAdd('compliance', both);
    assert.equal(scim.status, 200, scim.text);
    assert.equal((await put([])).status, 200);
    assert.deepEqual(await rolesOf('demo', signInOnly), [], "the sign-in's role goes");
    const group = await as(get().scimToken, 'GET', `/scim/v2/Groups/${roleGroupId('demo', 'compliance')}`);
    const inGroup = (group.json.members as { value: string }[] | undefined)?.some((m) => m.value === both);
    assert.deepEqual(
      { roles: await rolesOf('demo', both), inGroup },
      { roles: ['compliance'], inGroup: true },
      'SCIM put the member in the group: the mapping change must not take them out of it unseen',
    );
  });

  it('a PUT racing a sign-in and a SCIM write: all answer, nothing deadlocks, no role kept that should go', async () => {
    for (let round = 0; round < 3; round++) {
      assert.equal((await put([{ idp_group: `race${round}`, role: 'ops' }])).status, 200);
      const { e2e, idp } = get();
      const id = await addStaff(db(), 'demo', `racer${round}@demo.example`, [], `sub-racer${round}`);
      const other = await addStaff(db(), 'demo', `racer-other${round}@demo.example`, []);
      const [signedIn, removed, scim] = await Promise.all([
        federatedSignIn(e2e.gw, idp, {
          sub: `sub-racer${round}`,
          preferred_username: `racer${round}@demo.example`,
          groups: [`race${round}`],
        }),
        put([]),
        scimAdd('fraud', other),
      ]);
      assert.equal(signedIn.status, 200, signedIn.text);
      assert.equal(removed.status, 200, removed.text);
      assert.equal(scim.status, 200, scim.text);
      assert.deepEqual(
        await rolesOf('demo', id),
        [],
        'whichever came first, the removed mapping gives nothing',
      );
      assert.deepEqual(await rolesOf('demo', other), ['fraud']);
    }
  });

  it('a PUT taking a role from many members racing SCIM deleting some of them: all answer, each role taken once', async () => {
    assert.equal((await put([{ idp_group: 'churn', role: 'support' }])).status, 200);
    const { rows } = await db().query<{ id: string }>(
      `INSERT INTO staff_users (tenant_id, id, user_name, idp_groups, idp_roles)
       SELECT 'demo', gen_random_uuid(), 'churn-' || i || '@demo.example', '{churn}', '{support}'
       FROM generate_series(1, 400) AS i RETURNING id`,
    );
    const ids = rows.map((r) => r.id);
    await db().query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) SELECT 'demo', unnest($1::uuid[]), 'support'`,
      [ids],
    );
    const gone = ids.filter((_, i) => i % 40 === 7);
    const requestId = randomUUID();
    const [removed, ...deleted] = await Promise.all([
      put([], { 'x-request-id': requestId }),
      ...gone.map((id) => as(get().scimToken, 'DELETE', `/scim/v2/Users/${id}`)),
    ]);
    assert.equal(removed?.status, 200, removed?.text);
    for (const d of deleted) assert.equal(d.status, 204, d.text);
    const held = await db().query<{ n: string }>(
      `SELECT count(*) AS n FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = ANY($1::uuid[])`,
      [ids],
    );
    assert.equal(held.rows[0]?.n, '0');
    const { rows: records } = await db().query<{ id: string; n: string }>(
      `SELECT target->>'id' AS id, count(*) AS n FROM audit_log WHERE tenant_id = 'demo' AND action = 'staff.role_remove'
         AND attrs->>'requestId' = $1 GROUP BY 1`,
      [requestId],
    );
    const taken = new Map(records.map((r) => [r.id, r.n]));
    assert.ok(
      [...taken.values()].every((n) => n === '1'),
      'one record per role taken',
    );
    assert.deepEqual(
      ids.filter((id) => !gone.includes(id) && !taken.has(id)),
      [],
      'every member SCIM did not delete lost the role through the PUT',
    );
  });

  it('the edge refuses the removed role at the next request of every member it was taken from', async () => {
    assert.equal((await put([{ idp_group: 'crowd', role: 'admin' }])).status, 200);
    const members = await Promise.all(['c1', 'c2', 'c3'].map((n) => federated(`crowd-${n}`, ['crowd'])));
    const putFlag = (token: string) =>
      as(token, 'PUT', '/v1/flags/mapset_flag', {
        json: { enabled: true },
        headers: { 'idempotency-key': randomUUID() },
      });
    for (const m of members) {
      const r = await putFlag(m.signedIn.json.accessToken as string);
      assert.ok(r.status === 200 || r.status === 201, r.text);
    }
    assert.equal((await put([])).status, 200);
    for (const m of members) {
      const r = await eventually(
        () => putFlag(m.signedIn.json.accessToken as string),
        (x) => x.status === 403,
      );
      assert.equal(r.status, 403, r.text);
    }
  });
});
