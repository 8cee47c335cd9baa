/**
 * Writes of a tenant's group mappings through the dev gateway (issue 16): GET and PUT carry the
 * mapping's ETag and a PUT naming a stale one in If-Match is refused (412) with nothing changed,
 * so two Admins cannot undo each other unseen; and one PUT takes a role from thousands of members
 * with one audit record each, the tenant's hash chain intact.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { asBearer } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';

const path = '/v1/staff/group-mappings';
type Items = { idp_group: string; role: string }[];

describe('group mapping writes: versions and bulk removals', () => {
  let stack: E2eStack | undefined;
  let serviceAdmin = '';
  const get = () => stack ?? assert.fail('the stack did not start');
  const db = () => get().tdb.db;
  const as = asBearer(() => get().gw);
  const read = () => as(serviceAdmin, 'GET', path);
  const put = (items: Items, headers: Record<string, string> = {}) =>
    as(serviceAdmin, 'PUT', path, {
      json: { items },
      headers: { 'idempotency-key': randomUUID(), ...headers },
    });
  const etagOf = (r: Res): string => r.headers.etag ?? assert.fail(`no ETag: ${r.status} ${r.text}`);

  /** `n` members whose last federated sign-in's `group` gave them `role`, holding it now. */
  async function members(n: number, group: string, role: string): Promise<string[]> {
    const { rows } = await db().query<{ id: string }>(
      `INSERT INTO staff_users (tenant_id, id, user_name, idp_groups, idp_roles)
       SELECT 'demo', gen_random_uuid(), $1::text || '-' || i || '@demo.example', ARRAY[$1::text], ARRAY[$2::text]
       FROM generate_series(1, $3::int) AS i RETURNING id`,
      [group, role, n],
    );
    const ids = rows.map((r) => r.id);
    await db().query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) SELECT 'demo', unnest($1::uuid[]), $2`,
      [ids, role],
    );
    return ids;
  }
  const rolesOf = async (id: string) =>
    (
      await db().query<{ role: string }>(
        `SELECT role FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1 ORDER BY role`,
        [id],
      )
    ).rows.map((r) => r.role);
  const auditCount = async (action: string) =>
    Number(
      (
        await db().query<{ n: string }>(
          `SELECT count(*) AS n FROM audit_log WHERE tenant_id = 'demo' AND action = $1`,
          [action],
        )
      ).rows[0]?.n,
    );

  before(async () => {
    stack = await startE2eStack('staff-mappings-writes');
    serviceAdmin = (stack.demo as { serviceTokens: { admin: { token: string } } }).serviceTokens.admin.token;
  });
  after(async () => {
    await stack?.stop();
  });

  it('GET and PUT answer the ETag of the mapping in force; every PUT that changes it changes the ETag', async () => {
    const seen = [etagOf(await read())];
    for (const items of [
      [{ idp_group: 'tellers', role: 'ops' }],
      [{ idp_group: 'tellers', role: 'readonly' }],
      [
        { idp_group: 'tellers', role: 'readonly' },
        { idp_group: 'auditors', role: 'compliance' },
      ],
      [{ idp_group: 'auditors', role: 'compliance' }],
    ]) {
      const r = await put(items);
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(
        r.json.items,
        [...items].sort((a, b) => a.idp_group.localeCompare(b.idp_group)),
      );
      const etag = etagOf(r);
      assert.ok(!seen.includes(etag), `a new ETag for ${JSON.stringify(items)}: ${etag} in ${seen}`);
      const now = await read();
      assert.equal(etagOf(now), etag, 'GET names the version the PUT answered');
      assert.equal((await as(serviceAdmin, 'GET', path, { headers: { 'if-none-match': etag } })).status, 304);
      seen.push(etag);
    }
    // The version is the mapping's: putting the same one again names the same version, and
    // If-Match with it (or `*`) is honoured.
    const again = await put([{ idp_group: 'auditors', role: 'compliance' }], {
      'if-match': seen.at(-1) ?? '',
    });
    assert.equal(again.status, 200, again.text);
    assert.equal(etagOf(again), seen.at(-1));
    assert.equal((await put([{ idp_group: 'tellers', role: 'ops' }], { 'if-match': '*' })).status, 200);
    assert.equal(etagOf(await read()), seen[1]);
  });

  it('the API document declares If-Match on the PUT, optional, and on no other mapping route', async () => {
    const doc = (await as(serviceAdmin, 'GET', '/v1/openapi.json')).json as {
      paths: Record<
        string,
        Record<string, { parameters?: { name: string; required?: boolean; description?: string }[] }>
      >;
    };
    const op = doc.paths[path]?.put ?? assert.fail('PUT /v1/staff/group-mappings is documented');
    const ifMatch = op.parameters?.find((x) => x.name === 'If-Match');
    assert.equal(ifMatch?.required, false, JSON.stringify(op.parameters));
    assert.match(ifMatch?.description ?? '', /412/);
    const list = doc.paths[path]?.get ?? assert.fail('GET /v1/staff/group-mappings is documented');
    assert.equal(
      list.parameters?.find((x) => x.name === 'If-Match'),
      undefined,
    );
  });

  it('a PUT whose If-Match names a mapping since replaced is 412 and changes nothing', async () => {
    assert.equal((await put([{ idp_group: 'vault-staff', role: 'fraud' }])).status, 200);
    const [member = assert.fail('no member')] = await members(1, 'vault-staff', 'fraud');
    const first = await read();
    const seenByA = etagOf(first);
    // Admin B replaces the mapping (adding one) after Admin A read it.
    const byB = await put([
      { idp_group: 'vault-staff', role: 'fraud' },
      { idp_group: 'night-shift', role: 'ops' },
    ]);
    assert.equal(byB.status, 200, byB.text);
    const puts = await auditCount('staff.group_mappings.put');
    const removals = await auditCount('staff.role_remove');

    // Admin A's PUT, built on what A read, would drop B's mapping and take the member's role.
    const stale = await put([], { 'if-match': seenByA });
    assert.equal(stale.status, 412, stale.text);
    assert.match(stale.headers['content-type'] ?? '', /^application\/problem\+json/);
    assert.equal(stale.json.code, 'PRECONDITION_FAILED');
    assert.equal(stale.json.status, 412);
    const now = await read();
    assert.deepEqual(now.json.items, byB.json.items, "B's mapping stands");
    assert.equal(etagOf(now), etagOf(byB));
    assert.deepEqual(await rolesOf(member), ['fraud'], 'no role taken');
    assert.equal(await auditCount('staff.group_mappings.put'), puts, 'no change recorded');
    assert.equal(await auditCount('staff.role_remove'), removals, 'no removal recorded');

    // Read again, A's PUT goes through and takes the role.
    const fresh = await put([], { 'if-match': etagOf(now) });
    assert.equal(fresh.status, 200, fresh.text);
    assert.deepEqual(await rolesOf(member), []);
    assert.equal(await auditCount('staff.role_remove'), removals + 1);
  });

  it('of two PUTs sent at once with the same If-Match, one is applied and the other is 412', async () => {
    const read0 = etagOf(await read());
    const mine = [{ idp_group: 'race-a', role: 'ops' }];
    const theirs = [{ idp_group: 'race-b', role: 'fraud' }];
    const [a, b] = await Promise.all([put(mine, { 'if-match': read0 }), put(theirs, { 'if-match': read0 })]);
    assert.deepEqual([a.status, b.status].sort(), [200, 412], `${a.text} ${b.text}`);
    const winner = a.status === 200 ? a : b;
    const now = await read();
    assert.deepEqual(now.json.items, winner.json.items, 'the mapping is the applied one');
    assert.equal(etagOf(now), etagOf(winner));
  });

  it('one PUT takes a role from 5,000 members, one staff.role_remove record each, and the chain verifies', async () => {
    const n = 5000;
    assert.equal(
      (
        await put([
          { idp_group: 'bulk', role: 'ops' },
          { idp_group: 'bulk', role: 'support' },
        ])
      ).status,
      200,
    );
    const ops = await members(n, 'bulk', 'ops');
    // One member of them was given two roles by the group: two records for them.
    const [both = assert.fail('no member')] = ops;
    await db().query(
      `UPDATE staff_users SET idp_roles = '{ops,support}' WHERE tenant_id = 'demo' AND id = $1`,
      [both],
    );
    await db().query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) VALUES ('demo', $1, 'support')`,
      [both],
    );
    // Members whose sign-in recorded its groups only (before migration 1070): judged by the groups,
    // their staff_users row is not written, so only the roles' DELETE tells the edges of them.
    const groupsOnly = ops.slice(-100);
    await db().query(
      `UPDATE staff_users SET idp_roles = NULL WHERE tenant_id = 'demo' AND id = ANY($1::uuid[])`,
      [groupsOnly],
    );
    const listener = new pg.Client({
      connectionString: (db().pool.options as { connectionString?: string }).connectionString,
    });
    await listener.connect();
    const told = new Set<string>();
    listener.on('notification', (m) => {
      const p = JSON.parse(m.payload ?? '{}') as { tenantId?: string; userId?: string };
      if (p.tenantId === 'demo' && p.userId) told.add(p.userId);
    });
    await listener.query('LISTEN staff_changed');
    const requestId = randomUUID();
    try {
      const r = await put([], { 'x-request-id': requestId });
      assert.equal(r.status, 200, r.text);
      // The edges drop each member's cached roles on staff_changed (edge/state/store.ts).
      for (let i = 0; i < 100 && ops.some((id) => !told.has(id)); i++) {
        await listener.query('SELECT 1');
        await new Promise((done) => setTimeout(done, 50));
      }
      assert.deepEqual(
        ops.filter((id) => !told.has(id)),
        [],
        'staff_changed named every member',
      );
    } finally {
      await listener.end();
    }

    const left = await db().query<{ n: string }>(
      `SELECT count(*) AS n FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = ANY($1::uuid[])`,
      [ops],
    );
    assert.equal(left.rows[0]?.n, '0');
    const forgotten = await db().query<{ n: string }>(
      `SELECT count(*) AS n FROM staff_users WHERE tenant_id = 'demo' AND id = ANY($1::uuid[]) AND idp_roles <> '{}'`,
      [ops],
    );
    assert.equal(forgotten.rows[0]?.n, '0', "the sign-in's record no longer gives the roles taken");
    const { rows } = await db().query<{
      actor: { type: string; id: string };
      target: { type: string; id: string };
      attrs: { role: string; groups: string[]; reason: string; requestId: string };
    }>(
      `SELECT actor, target, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'staff.role_remove'
         AND attrs->>'requestId' = $1 ORDER BY id`,
      [requestId],
    );
    assert.equal(rows.length, n + 1);
    const [change] = (
      await db().query<{ actor: { type: string; id: string }; attrs: { rolesRevoked: number } }>(
        `SELECT actor, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'staff.group_mappings.put'
           AND attrs->>'requestId' = $1`,
        [requestId],
      )
    ).rows;
    assert.equal(change?.attrs.rolesRevoked, n + 1);
    const byMember = new Map<string, string[]>();
    for (const x of rows) {
      assert.deepEqual(x.actor, change?.actor, 'each record names the Admin who changed the mapping');
      assert.equal(x.actor.type, 'staff');
      assert.equal(x.target.type, 'staff_user');
      assert.equal(x.attrs.reason, 'group_mapping_removed');
      assert.deepEqual(x.attrs.groups, ['bulk']);
      byMember.set(x.target.id, [...(byMember.get(x.target.id) ?? []), x.attrs.role]);
    }
    assert.deepEqual([...byMember.keys()].sort(), [...ops].sort(), 'one member per record, every member');
    assert.deepEqual(byMember.get(both), ['ops', 'support']);

    const verified = await as(serviceAdmin, 'GET', '/v1/audit:verify');
    assert.equal(verified.status, 200, verified.text);
    assert.equal(verified.json.ok, true, verified.text);
    assert.ok(verified.json.count > n, verified.text);
  });
});
