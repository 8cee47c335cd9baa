/**
 * A member's roles are part of its SCIM representation (`groups`), so granting or taking one bumps
 * staff_users.version, the User's ETag (migration 1080's statement triggers), once per member and
 * transaction. These tests drive the store's own statements from real transactions on PostgreSQL:
 * concurrent writers, a mapping change over thousands of members, writes of the member's row in
 * the same transaction.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import {
  changeStaffRole,
  insertStaffUser,
  lockGroupMappings,
  lockStaffUser,
  recordIdpGroups,
  removeStaffRoles,
  setStaffRoles,
  tombstoneStaffUser,
  updateStaffUser,
  type StaffUserFields,
} from '../../core/staff/store.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const tenant = 'rv1';
const fields = (userName: string): StaffUserFields => ({
  userName,
  externalId: null,
  displayName: null,
  attributes: {},
  active: true,
});

describe('staff role changes and the member version', () => {
  let tdb: TestDb;
  let n = 0;

  const member = async (): Promise<string> => {
    const id = randomUUID();
    n += 1;
    await tdb.db.tx((q) => insertStaffUser(q, tenant, id, fields(`member${n}@example.org`), Date.now()));
    return id;
  };
  const versionOf = async (id: string): Promise<number> => {
    const { rows } = await tdb.db.query<{ version: number }>(
      'SELECT version FROM staff_users WHERE tenant_id = $1 AND id = $2',
      [tenant, id],
    );
    return rows[0]?.version ?? Number.NaN;
  };
  /** A transaction on its own connection, driven statement by statement. */
  const begin = async (): Promise<pg.PoolClient> => {
    const c = await tdb.db.pool.connect();
    await c.query('BEGIN');
    return c;
  };
  /** False when `p` settles before its connection waits for a lock; true once it waits. */
  const stillWaiting = async (p: Promise<unknown>): Promise<boolean> => {
    let settled = false;
    p.then(
      () => {
        settled = true;
      },
      () => {
        settled = true;
      },
    );
    // A backend of this database waiting for a lock.
    for (;;) {
      const { rows } = await tdb.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      if ((rows[0]?.n ?? 0) > 0 || settled) return !settled;
      await new Promise((r) => setImmediate(r));
    }
  };

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
      [tenant],
    );
  });
  after(() => tdb.drop());

  it('bumps once for a statement granting several roles, and once more for a later transaction', async () => {
    const id = await member();
    const v = await versionOf(id);
    await tdb.db.tx(async (q) => {
      await setStaffRoles(q, tenant, id, ['admin', 'ops', 'fraud']);
      await changeStaffRole(q, tenant, id, 'support', true);
    });
    assert.equal(await versionOf(id), v + 1, 'one transaction, one bump');
    await changeStaffRole(tdb.db, tenant, id, 'support', false);
    assert.equal(await versionOf(id), v + 2);
    assert.equal(await changeStaffRole(tdb.db, tenant, id, 'support', false), false);
    assert.equal(await versionOf(id), v + 2, 'nothing taken, nothing bumped');
  });

  it('loses no bump when two transactions change the same member at once', async () => {
    const id = await member();
    const v = await versionOf(id);
    const a = await begin();
    const b = await begin();
    try {
      await changeStaffRole(a, tenant, id, 'ops', true);
      const second = changeStaffRole(b, tenant, id, 'fraud', true);
      assert.ok(await stillWaiting(second), "the second waits for the first's bump");
      await a.query('COMMIT');
      await second;
      await b.query('COMMIT');
    } finally {
      a.release();
      b.release();
    }
    assert.equal(await versionOf(id), v + 2, 'each transaction bumped the version it saw committed');
  });

  it('bumps each of thousands of members once for a mapping change taking their roles', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 2000; i += 1) ids.push(randomUUID());
    await tdb.db.query(
      `INSERT INTO staff_users (tenant_id, id, user_name) SELECT $1, u, 'bulk-' || u FROM unnest($2::uuid[]) AS u`,
      [tenant, ids],
    );
    await tdb.db.query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role)
       SELECT $1, u, r FROM unnest($2::uuid[]) AS u, unnest(ARRAY['ops', 'fraud']) AS r`,
      [tenant, ids],
    );
    const pairs = ids.flatMap((userId) => [
      { userId, role: 'ops' as const },
      { userId, role: 'fraud' as const },
    ]);
    const removed = await tdb.db.tx((q) => removeStaffRoles(q, tenant, pairs));
    assert.equal(removed.length, 4000);
    const { rows } = await tdb.db.query<{ version: number; n: number }>(
      'SELECT version, count(*)::int AS n FROM staff_users WHERE tenant_id = $1 AND id = ANY($2) GROUP BY version',
      [tenant, ids],
    );
    // Inserted at version 1, roles granted by one statement (2), taken by one (3).
    assert.deepEqual(rows, [{ version: 3, n: 2000 }]);
  });

  // A write of the member's row that does not bump (idp_groups, idp_roles) does not count as the
  // bump: the transaction that bumped is recorded in the row (migration 1081), not read from xmin.
  it('bumps for a role granted after a write of the member that does not bump', async () => {
    const id = await member();
    const v = await versionOf(id);
    await tdb.db.tx(async (q) => {
      await recordIdpGroups(q, tenant, id, ['ops-group'], []);
      await changeStaffRole(q, tenant, id, 'ops', true);
    });
    assert.equal(await versionOf(id), v + 1);
  });

  // A member's write under a savepoint marks the row with the top-level transaction (migration 1081):
  // a role change after it in the same transaction does not bump again.
  it("answers the version a following read shows when a member's write and a role change share a transaction", async () => {
    const id = await member();
    const answered = await tdb.db.tx(async (q) => {
      const u = await updateStaffUser(q, tenant, id, fields(`renamed-${id}@example.org`), Date.now());
      await changeStaffRole(q, tenant, id, 'ops', true);
      return u.version;
    });
    assert.equal(await versionOf(id), answered);
  });

  // A SCIM DELETE (lockStaffUser, then its roles) against a role removal of the same member: the
  // removal locks the member row before the role row (core/staff/store.ts lockMembers), the order a
  // deletion takes them in, so it waits instead of deadlocking.
  it('never deadlocks a member deletion against a concurrent removal of its role', async () => {
    const id = await member();
    await setStaffRoles(tdb.db, tenant, id, ['ops']);
    const del = await begin();
    const patch = await begin();
    const errors: string[] = [];
    const code = (err: unknown) => {
      errors.push(String((err as { code?: string }).code));
    };
    try {
      assert.ok(await lockStaffUser(del, tenant, id));
      const removal = changeStaffRole(patch, tenant, id, 'ops', false).catch(code);
      await stillWaiting(removal);
      const deletion = tombstoneStaffUser(del, tenant, id, Date.now()).catch(code);
      await Promise.race([removal, deletion]);
      await del.query(errors.length > 0 ? 'ROLLBACK' : 'COMMIT').catch(code);
      await Promise.all([removal, deletion]);
      await patch.query('ROLLBACK');
    } finally {
      del.release();
      patch.release();
    }
    assert.deepEqual(errors, []);
  });

  // A bump under a savepoint that is rolled back takes its marker with it (migration 1081 writes the
  // marker in the same row version): the role change that follows still bumps, once.
  it('bumps for a role change after a rolled-back savepoint that had bumped', async () => {
    const id = await member();
    const v = await versionOf(id);
    await tdb.db.tx(async (q) => {
      await q.query('SAVEPOINT s');
      await changeStaffRole(q, tenant, id, 'ops', true);
      await updateStaffUser(q, tenant, id, fields(`sp-${id}@example.org`), Date.now());
      await q.query('ROLLBACK TO SAVEPOINT s');
      assert.equal(await versionOf(id), v, 'the savepoint took its bumps with it (as this transaction sees)');
      await changeStaffRole(q, tenant, id, 'fraud', true);
    });
    assert.equal(await versionOf(id), v + 1);
    const { rows } = await tdb.db.query<{ role: string }>(
      'SELECT role FROM staff_user_roles WHERE tenant_id = $1 AND user_id = $2',
      [tenant, id],
    );
    assert.deepEqual(
      rows.map((r) => r.role),
      ['fraud'],
    );
  });

  // Tenant isolation (house rules): member ids are unique across tenants (0800's staff_users_id_idx),
  // so the attack is another tenant's member id named here: a role removal in this tenant neither
  // waits for a lock on that member nor takes its role nor bumps it.
  it("neither waits for, takes from nor bumps another tenant's member named by id", async () => {
    const other = 'rv2';
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES') ON CONFLICT DO NOTHING`,
      [other],
    );
    const id = randomUUID();
    await tdb.db.tx((q) => insertStaffUser(q, other, id, fields(`twin-${id}@example.org`), Date.now()));
    await setStaffRoles(tdb.db, other, id, ['ops']);
    const stateOf = async () =>
      (
        await tdb.db.query<{ version: number; roles: string[] | null }>(
          `SELECT u.version, (SELECT array_agg(r.role) FROM staff_user_roles r WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id) AS roles
           FROM staff_users u WHERE u.tenant_id = $1 AND u.id = $2`,
          [other, id],
        )
      ).rows;
    const before = await stateOf();
    const holder = await begin();
    try {
      assert.ok(await lockStaffUser(holder, other, id));
      const removal = removeStaffRoles(tdb.db, tenant, [{ userId: id, role: 'ops' }]);
      assert.equal(
        await stillWaiting(removal),
        false,
        "the other tenant's lock is not this tenant's business",
      );
      assert.deepEqual(await removal, []);
      assert.equal(await changeStaffRole(tdb.db, tenant, id, 'ops', false), false);
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    assert.deepEqual(await stateOf(), before);
    assert.deepEqual(before, [{ version: before[0]?.version, roles: ['ops'] }]);
  });

  // A mapping change (core/staff/mapping-change.ts: the mappings' lock, then removeStaffRoles over
  // many members), a SCIM Group PATCH after it (the mappings' lock, then changeStaffRole member by
  // member in request order) and SCIM User DELETEs of members in both (lockStaffUser, then
  // tombstoneStaffUser), all at once: none deadlocks, and every member's version moved once per
  // transaction that changed its roles, plus the deletion's own bump.
  it('neither deadlocks nor loses or doubles a bump: a mapping change, a Group PATCH and User DELETEs at once', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 30; i += 1) ids.push(await member());
    await tdb.db.query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role)
       SELECT $1, u, r FROM unnest($2::uuid[]) AS u, unnest(ARRAY['ops', 'fraud']) AS r`,
      [tenant, ids],
    );
    const start = new Map<string, number>();
    for (const id of ids) start.set(id, await versionOf(id));
    const bumps = new Map<string, number>(ids.map((id) => [id, 0]));
    const bump = (id: string) => bumps.set(id, (bumps.get(id) ?? 0) + 1);
    const errors: string[] = [];
    const run = async (fn: (c: pg.PoolClient) => Promise<void>, onCommit: () => void) => {
      const c = await begin();
      try {
        await fn(c);
        await c.query('COMMIT');
        onCommit();
      } catch (err) {
        errors.push(String((err as { code?: string }).code ?? err));
        await c.query('ROLLBACK');
      } finally {
        c.release();
      }
    };
    let mapped: string[] = [];
    const mapping = run(
      async (c) => {
        await lockGroupMappings(c, tenant);
        const removed = await removeStaffRoles(
          c,
          tenant,
          [...ids].reverse().map((userId) => ({ userId, role: 'ops' as const })),
        );
        mapped = removed.map((r) => r.userId);
      },
      () => {
        for (const id of new Set(mapped)) bump(id);
      },
    );
    const patched: string[] = [];
    const patch = run(
      async (c) => {
        await lockGroupMappings(c, tenant);
        // Request order, not id order: the highest ids first.
        for (const id of [...ids].sort().reverse())
          if (await changeStaffRole(c, tenant, id, 'fraud', false)) patched.push(id);
      },
      () => {
        for (const id of patched) bump(id);
      },
    );
    const doomed = [ids[3], ids[11], ids[17], ids[29]].filter((x): x is string => x !== undefined);
    const deletions = doomed.map((id) => {
      let held = 0;
      return run(
        async (c) => {
          const u = await lockStaffUser(c, tenant, id);
          assert.ok(u);
          held = u.roles.length;
          await tombstoneStaffUser(c, tenant, id, Date.now());
        },
        () => {
          if (held > 0) bump(id);
          bump(id);
        },
      );
    });
    await Promise.all([mapping, patch, ...deletions]);
    assert.deepEqual(errors, [], 'no deadlock (40P01) or other failure');
    for (const id of ids)
      assert.equal(await versionOf(id), (start.get(id) ?? 0) + (bumps.get(id) ?? 0), `member ${id}`);
  });

  // A federated sign-in (core/staff/federation.ts: the mappings' lock, setStaffRoles, recordIdpGroups)
  // racing a SCIM PUT of the same member (lockStaffUser, updateStaffUser), in both orders: each
  // bumps the version the other committed, and the PUT's If-Match check sees the sign-in's bump.
  for (const first of ['put', 'sign-in'] as const)
    it(`bumps twice for a federated sign-in and a SCIM PUT of one member at once (${first} first)`, async () => {
      const id = await member();
      const v = await versionOf(id);
      const put = await begin();
      const signIn = await begin();
      const signingIn = async () => {
        await lockGroupMappings(signIn, tenant);
        await setStaffRoles(signIn, tenant, id, ['ops']);
        await recordIdpGroups(signIn, tenant, id, ['ops-group'], ['ops']);
      };
      try {
        if (first === 'put') {
          const before = await lockStaffUser(put, tenant, id);
          assert.equal(before?.version, v);
          const roles = signingIn();
          assert.ok(await stillWaiting(roles), 'the sign-in waits for the PUT');
          const after = await updateStaffUser(put, tenant, id, fields(`put-${id}@example.org`), Date.now());
          assert.equal(after.version, v + 1);
          await put.query('COMMIT');
          await roles;
          await signIn.query('COMMIT');
        } else {
          await signingIn();
          const locked = lockStaffUser(put, tenant, id);
          assert.ok(await stillWaiting(locked), 'the PUT waits for the sign-in');
          await signIn.query('COMMIT');
          const before = await locked;
          assert.equal(before?.version, v + 1, "the PUT's If-Match is checked against the sign-in's bump");
          const after = await updateStaffUser(put, tenant, id, fields(`put-${id}@example.org`), Date.now());
          assert.equal(after.version, v + 2);
          await put.query('COMMIT');
        }
      } finally {
        put.release();
        signIn.release();
      }
      assert.equal(await versionOf(id), v + 2);
    });

  // Store convention (staffUserById, lockStaffUser): an id that is not a UUID names no member,
  // for a role change too (it threw 22P02 from the uuid cast; no HTTP path reached it).
  it('treats a member id that is not a UUID as no member when changing roles', async () => {
    assert.equal(await changeStaffRole(tdb.db, tenant, 'not-a-uuid', 'ops', true), false);
    assert.deepEqual(await removeStaffRoles(tdb.db, tenant, [{ userId: 'not-a-uuid', role: 'ops' }]), []);
  });
});
