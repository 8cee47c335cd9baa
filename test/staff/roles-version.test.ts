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

  // Known break (migration 1080's premise "xmin is this transaction: bumped already" is false for
  // a write of the member's row that does not bump: idp_groups and idp_roles, migrations 1050 and
  // 1070, "bumps neither version nor updated_at"). Today every caller writes those after the role
  // change; one that wrote them first would lose the bump, and the client holding the copy without
  // the role would be told 304. Not fixable here: migrations are append-only.
  it('bumps for a role granted after a write of the member that does not bump', {
    todo: 'migration 1080 skips a row written earlier in the transaction whatever the write',
  }, async () => {
    const id = await member();
    const v = await versionOf(id);
    await tdb.db.tx(async (q) => {
      await recordIdpGroups(q, tenant, id, ['ops-group'], []);
      await changeStaffRole(q, tenant, id, 'ops', true);
    });
    assert.equal(await versionOf(id), v + 1);
  });

  // Known break: a member's write under a savepoint (writeUser) stamps the row with the
  // subtransaction's id, which is not pg_current_xact_id(): a role change after it in the same
  // transaction bumps a second time, and the version updateStaffUser answered is no longer the
  // one a following GET shows. No caller does both today (SCIM User writes never touch roles).
  it("answers the version a following read shows when a member's write and a role change share a transaction", {
    todo: 'xmin of a row written under a savepoint is the subtransaction id',
  }, async () => {
    const id = await member();
    const answered = await tdb.db.tx(async (q) => {
      const u = await updateStaffUser(q, tenant, id, fields(`renamed-${id}@example.org`), Date.now());
      await changeStaffRole(q, tenant, id, 'ops', true);
      return u.version;
    });
    assert.equal(await versionOf(id), answered);
  });

  // Known break: a SCIM DELETE of a member (lockStaffUser, then tombstoneStaffUser) and a Group
  // PATCH or mapping change taking one of its roles at the same moment. The PATCH deletes the role
  // row, then migration 1080's trigger waits for the member row the DELETE holds; the DELETE then
  // waits to delete that role row: PostgreSQL aborts one with 40P01 after deadlock_timeout (Db.tx
  // retries it, so callers see a stall, not an error). Before 1080 the PATCH never touched the
  // member row. A fix locks the member rows before their roles (core/staff/store.ts).
  it('never deadlocks a member deletion against a concurrent removal of its role', {
    todo: 'the role removal locks the role row, then the member row: the reverse of a deletion',
  }, async () => {
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
