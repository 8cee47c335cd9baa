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
});
