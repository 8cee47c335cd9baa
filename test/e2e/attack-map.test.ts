/**
 * Attacks on issue 16 (a group mapping removed takes away at once the roles it gave federated
 * members) through the dev gateway against a real OpenID Connect provider: a role SCIM granted
 * after the sign-in or after a mapping change took it, a refused audit record, a replayed PUT, callers below Admin at AAL 2.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { roleGroupId } from '../../core/staff/scim/groups.ts';
import { type AuditRefusal, installAuditRefusal } from '../helpers/audit-refusal.ts';
import { asBearer } from '../helpers/gateway.ts';
import { addStaff, adminStepUpToken, signIn } from '../staff/fixtures.ts';
import { federatedSignIn } from '../staff/idp.ts';
import {
  type MappingStack,
  roleRemovals,
  rolesOf as tenantRolesOf,
  startMappingStack,
} from '../staff/mapping-stack.ts';

const patchOp = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const path = '/v1/staff/group-mappings';
type Items = { idp_group: string; role: string }[];

describe('attacks on group mappings taking roles away', () => {
  let setup: (MappingStack & { refusal: AuditRefusal }) | undefined;
  /** Stopped in `after` even when the rest of the setup failed. */
  let stack: MappingStack | undefined;
  const get = () => setup ?? assert.fail('the stack did not start');
  const db = () => get().e2e.tdb.db;
  const as = asBearer(() => get().e2e.gw);
  const write = (token: string, method: string, p: string, json: unknown, key: string = randomUUID()) =>
    as(token, method, p, { json, headers: { 'idempotency-key': key } });
  const rolesOf = (id: string) => tenantRolesOf(db(), 'demo', id);
  const removals = (id: string) => roleRemovals(db(), id);
  /** The service Admin's PUT (no step-up: a service token). */
  const servicePut = (items: Items, key?: string) => write(get().serviceAdmin, 'PUT', path, { items }, key);
  /** A staff member holding `roles`, signed in at `aal`, and their PUT of the mappings. */
  async function staffPut(userName: string, roles: ('admin' | 'readonly')[], aal: 1 | 2, items: Items) {
    const { keys } = get();
    const id = await addStaff(db(), 'demo', userName, roles);
    const session = await signIn(db(), keys, 'demo', id, aal);
    const s = { tenantId: 'demo', userId: id, sessionId: session.sessionId };
    // An Admin at AAL 2 writes with a step-up token bound to this request; the others as they are.
    const stepUp = aal === 2 && roles.includes('admin');
    const token = stepUp ? await adminStepUpToken(keys, s, 'PUT', path, { items }) : session.accessToken;
    return write(token, 'PUT', path, { items });
  }
  /** A member signed in through the provider with `groups`. */
  async function federated(name: string, groups: string[]): Promise<string> {
    const { e2e, idp } = get();
    const id = await addStaff(db(), 'demo', `${name}@demo.example`, [], `sub-${name}`);
    const r = await federatedSignIn(e2e.gw, idp, {
      sub: `sub-${name}`,
      preferred_username: `${name}@demo.example`,
      groups,
    });
    assert.equal(r.status, 200, r.text);
    return id;
  }

  /** Whether another transaction comes to wait for an advisory lock (polled for up to 5 s). */
  async function someoneWaitsForALock(): Promise<boolean> {
    for (let i = 0; i < 100; i++) {
      const { rows } = await db().query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`,
      );
      if (rows[0]?.n !== '0') return true;
      await new Promise((res) => setTimeout(res, 50));
    }
    return false;
  }

  before(async () => {
    stack = await startMappingStack('attack-map');
    setup = { ...stack, refusal: await installAuditRefusal(stack.e2e.tdb.db) };
  });
  after(async () => {
    await stack?.stop();
  });

  it('a role SCIM granted after the sign-in stays when a mapping the sign-in never applied goes', async () => {
    assert.equal((await servicePut([])).status, 200);
    // Signed in while `late-auditors` mapped to nothing: the sign-in gave no role.
    const id = await federated('late', ['late-auditors']);
    assert.deepEqual(await rolesOf(id), []);
    // The mapping added now counts from the next sign-in only; SCIM grants ReadOnly meanwhile.
    assert.equal((await servicePut([{ idp_group: 'late-auditors', role: 'readonly' }])).status, 200);
    assert.deepEqual(await rolesOf(id), []);
    const scim = await as(get().scimToken, 'PATCH', `/scim/v2/Groups/${roleGroupId('demo', 'readonly')}`, {
      json: { schemas: [patchOp], Operations: [{ op: 'add', path: 'members', value: [{ value: id }] }] },
      headers: { 'content-type': 'application/scim+json' },
    });
    assert.equal(scim.status, 200, scim.text);
    assert.deepEqual(await rolesOf(id), ['readonly']);

    assert.equal((await servicePut([])).status, 200);
    assert.deepEqual(await rolesOf(id), ['readonly'], 'the mapping never gave this role: SCIM did');
    assert.equal((await removals(id)).length, 0);
  });

  it('a role SCIM granted again after a mapping change took it stays when that mapping is re-added and removed', async () => {
    const scimAdd = (id: string) =>
      as(get().scimToken, 'PATCH', `/scim/v2/Groups/${roleGroupId('demo', 'support')}`, {
        json: { schemas: [patchOp], Operations: [{ op: 'add', path: 'members', value: [{ value: id }] }] },
        headers: { 'content-type': 'application/scim+json' },
      });
    assert.equal((await servicePut([{ idp_group: 'regrant', role: 'support' }])).status, 200);
    const id = await federated('regrant', ['regrant']);
    assert.deepEqual(await rolesOf(id), ['support']);
    assert.equal((await servicePut([])).status, 200);
    assert.deepEqual(await rolesOf(id), [], 'the mapping gave it: taken');
    const scim = await scimAdd(id);
    assert.equal(scim.status, 200, scim.text);
    // Re-added, the mapping gives nothing before the next sign-in; the role held is SCIM's now.
    assert.equal((await servicePut([{ idp_group: 'regrant', role: 'support' }])).status, 200);
    assert.equal((await servicePut([])).status, 200);
    assert.deepEqual(await rolesOf(id), ['support'], 'SCIM granted it after the mapping took it');
    assert.equal((await removals(id)).length, 1);
  });

  it('a role the sign-in gave that SCIM then took and granted again stays when the mapping goes', async () => {
    const scimMember = (op: 'add' | 'remove', id: string) =>
      as(get().scimToken, 'PATCH', `/scim/v2/Groups/${roleGroupId('demo', 'compliance')}`, {
        json: {
          schemas: [patchOp],
          Operations: [
            op === 'add'
              ? { op, path: 'members', value: [{ value: id }] }
              : { op, path: `members[value eq "${id}"]` },
          ],
        },
        headers: { 'content-type': 'application/scim+json' },
      });
    assert.equal((await servicePut([{ idp_group: 'readd', role: 'compliance' }])).status, 200);
    const id = await federated('readd', ['readd']);
    assert.deepEqual(await rolesOf(id), ['compliance']);
    const removed = await scimMember('remove', id);
    assert.equal(removed.status, 200, removed.text);
    assert.deepEqual(await rolesOf(id), []);
    const added = await scimMember('add', id);
    assert.equal(added.status, 200, added.text);
    assert.equal((await servicePut([])).status, 200);
    assert.deepEqual(await rolesOf(id), ['compliance'], 'SCIM granted it last');
  });

  it('group names like __proto__, constructor, odd case and spaces map and unmap exactly', async () => {
    const odd = ['__proto__', 'constructor', 'Ops Team ', 'ADMIN'];
    assert.equal((await servicePut(odd.map((g) => ({ idp_group: g, role: 'fraud' })))).status, 200);
    const id = await federated('odd', ['__proto__', 'ops team', 'toString']);
    assert.deepEqual(await rolesOf(id), ['fraud']);
    // Only the exact names stay mapped: `ops team` never matched `Ops Team `.
    assert.equal((await servicePut([{ idp_group: 'ops team', role: 'ops' }])).status, 200);
    assert.deepEqual(await rolesOf(id), []);
    assert.deepEqual(
      (await removals(id)).map((r) => r.attrs.groups),
      [['__proto__']],
    );
  });

  it('a PUT taking a role from thousands of members answers, takes every one and audits each', async () => {
    const n = 2000;
    assert.equal((await servicePut([{ idp_group: 'bulk', role: 'ops' }])).status, 200);
    const { rows } = await db().query<{ id: string }>(
      `INSERT INTO staff_users (tenant_id, id, user_name, idp_groups, idp_roles)
       SELECT 'demo', gen_random_uuid(), 'bulk-' || i || '@demo.example', '{bulk}', '{ops}' FROM generate_series(1, $1) AS i
       RETURNING id`,
      [n],
    );
    await db().query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) SELECT 'demo', unnest($1::uuid[]), 'ops'`,
      [rows.map((r) => r.id)],
    );
    const r = await servicePut([]);
    assert.equal(r.status, 200, r.text);
    const left = await db().query<{ n: string }>(
      `SELECT count(*) AS n FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = ANY($1::uuid[])`,
      [rows.map((x) => x.id)],
    );
    assert.equal(left.rows[0]?.n, '0');
    const audited = await db().query<{ n: string }>(
      `SELECT count(*) AS n FROM audit_log WHERE tenant_id = 'demo' AND action = 'staff.role_remove'
         AND target->>'id' = ANY($1::text[])`,
      [rows.map((x) => x.id)],
    );
    assert.equal(audited.rows[0]?.n, String(n));
  });

  it('a SCIM group write waits for a mapping change in progress instead of crossing its row locks', async () => {
    const id = await federated('waiter', []);
    const inFlight = db().tx(async (q) => {
      // What a mapping change holds while it takes roles away (lockGroupMappings).
      await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', ['staff-group-mappings:demo']);
      const scim = as(get().scimToken, 'PATCH', `/scim/v2/Groups/${roleGroupId('demo', 'fraud')}`, {
        json: { schemas: [patchOp], Operations: [{ op: 'add', path: 'members', value: [{ value: id }] }] },
        headers: { 'content-type': 'application/scim+json' },
      });
      const seen = await someoneWaitsForALock();
      const held = await rolesOf(id);
      return { seen, held, scim };
    });
    const { seen, held, scim } = await inFlight;
    assert.ok(seen, 'the SCIM write waited for the mappings lock');
    assert.deepEqual(held, [], 'nothing changed while the mapping change held the lock');
    const answered = await scim;
    assert.equal(answered.status, 200, answered.text);
    assert.deepEqual(await rolesOf(id), ['fraud']);
  });

  it('a sign-in waiting on a mapping change in progress gets only the roles the change leaves', async () => {
    const { e2e, idp } = get();
    assert.equal((await servicePut([{ idp_group: 'racer', role: 'ops' }])).status, 200);
    const id = await addStaff(db(), 'demo', 'racer@demo.example', [], 'sub-racer');
    const signingIn = await db().tx(async (q) => {
      // A mapping change in progress: it holds the mappings' lock and has removed `racer`.
      await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', ['staff-group-mappings:demo']);
      await q.query(`DELETE FROM staff_group_mappings WHERE tenant_id = 'demo' AND idp_group = 'racer'`);
      const pending = federatedSignIn(e2e.gw, idp, {
        sub: 'sub-racer',
        preferred_username: 'racer@demo.example',
        groups: ['racer'],
      });
      const seen = await someoneWaitsForALock();
      assert.ok(seen, 'the sign-in waited for the mappings lock');
      return { pending };
    });
    const r = await signingIn.pending;
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(await rolesOf(id), [], 'the removed mapping gave nothing');
  });

  it('a refused audit record leaves the roles and the mappings as they were', async () => {
    const { refusal } = get();
    assert.equal((await servicePut([{ idp_group: 'vault', role: 'ops' }])).status, 200);
    const id = await federated('vault', ['vault']);
    assert.deepEqual(await rolesOf(id), ['ops']);
    await refusal.refuse('staff.role_remove');
    try {
      const r = await servicePut([]);
      assert.equal(r.status, 500, r.text);
      assert.doesNotMatch(r.text, /audit refused|\bat .*\.ts:\d+/);
    } finally {
      await refusal.clear();
    }
    assert.deepEqual(await rolesOf(id), ['ops']);
    const now = await as(get().serviceAdmin, 'GET', path);
    assert.deepEqual(now.json.items, [{ idp_group: 'vault', role: 'ops' }]);
    assert.equal((await servicePut([])).status, 200);
    assert.deepEqual(await rolesOf(id), []);
  });

  it('a replayed PUT (same Idempotency-Key) answers as the first and takes nothing twice', async () => {
    assert.equal((await servicePut([{ idp_group: 'replay', role: 'fraud' }])).status, 200);
    const id = await federated('replay', ['replay']);
    assert.deepEqual(await rolesOf(id), ['fraud']);
    const key = randomUUID();
    const first = await servicePut([], key);
    assert.equal(first.status, 200, first.text);
    // Granted again by hand between the PUT and its replay: the replay must not take it.
    await db().query(`INSERT INTO staff_user_roles (tenant_id, user_id, role) VALUES ('demo', $1, 'fraud')`, [
      id,
    ]);
    const replay = await servicePut([], key);
    assert.equal(replay.status, 200, replay.text);
    assert.deepEqual(replay.json, first.json);
    assert.deepEqual(await rolesOf(id), ['fraud']);
    assert.equal((await removals(id)).length, 1);
  });

  it('an Admin at AAL 1 and a ReadOnly member at AAL 2 cannot change the mappings', async () => {
    assert.equal((await servicePut([{ idp_group: 'guarded', role: 'compliance' }])).status, 200);
    const id = await federated('guarded', ['guarded']);
    const low = await staffPut('aal1-admin@demo.example', ['admin'], 1, []);
    assert.equal(low.status, 403, low.text);
    const reader = await staffPut('reader@demo.example', ['readonly'], 2, []);
    assert.equal(reader.status, 403, reader.text);
    assert.deepEqual(await rolesOf(id), ['compliance']);
    const ok = await staffPut('aal2-admin@demo.example', ['admin'], 2, []);
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(await rolesOf(id), []);
  });
});
