/**
 * Staff sessions and tokens (issue 14, the foundation every sign-in method uses): a session of
 * subject_type 'user', a refresh family, and an access token carrying the internal claims of
 * SPEC 2.4.1 (org_roles in the member's tenant, tenant_roles in the tenants it owns).
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { KeyStore } from '../../core/keys/keys.ts';
import { rolesForGroups, setStaffRoles, staffUserById, staffUserByName } from '../../core/staff/store.ts';
import { startStaffSession, staffAudience, staffTokenTyp } from '../../core/staff/tokens.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('staff sessions and tokens', () => {
  let tdb: TestDb;
  let keys: KeyStore;
  const userId = randomUUID();
  before(async () => {
    tdb = await freshDatabase();
    keys = new KeyStore(tdb.db, randomBytes(32));
    const q = tdb.db;
    for (const id of ['op', 'child', 'other']) {
      await q.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [
        id,
      ]);
    }
    await q.query(`INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
                   VALUES ('op', 'tenant', 'op', 'owner', 'tenant', 'child')`);
    await q.query(`INSERT INTO staff_users (tenant_id, id, user_name) VALUES ('op', $1, 'Ada@Example.org')`, [
      userId,
    ]);
    await setStaffRoles(q, 'op', userId, ['admin', 'support']);
    await q.query(
      `INSERT INTO staff_group_mappings (tenant_id, idp_group, role) VALUES ('op', 'payments-admins', 'admin')`,
    );
  });
  after(() => tdb?.drop());

  it('finds members by id and by userName case-insensitively, with their roles', async () => {
    assert.deepEqual((await staffUserByName(tdb.db, 'op', 'ada@example.ORG'))?.roles, ['admin', 'support']);
    assert.equal((await staffUserById(tdb.db, 'op', userId))?.userName, 'Ada@Example.org');
    assert.equal(
      await staffUserById(tdb.db, 'other', userId),
      undefined,
      'another tenant does not see the member',
    );
    assert.equal(await staffUserById(tdb.db, 'op', 'not-a-uuid'), undefined);
  });

  it('maps identity-provider groups and role-group names onto roles, ignoring unknown groups', async () => {
    assert.deepEqual(await rolesForGroups(tdb.db, 'op', ['payments-admins', 'compliance', 'unknown']), [
      'admin',
      'compliance',
    ]);
    assert.deepEqual(
      await rolesForGroups(tdb.db, 'other', ['payments-admins']),
      [],
      'mappings are per tenant',
    );
  });

  it('issues a token with the internal claims and records a user session', async () => {
    const t = await startStaffSession(
      tdb.db,
      keys,
      { tenantId: 'op', userId, aal: 2, amr: ['hwk'], ip: '127.0.0.1', method: 'passkey' },
      Date.now(),
    );
    const claims = await keys.verify(t.accessToken, { audience: staffAudience, typ: staffTokenTyp });
    assert.equal(claims.sub, userId);
    assert.equal(claims.tid, 'op');
    assert.equal(claims.sid, t.sessionId);
    assert.equal(claims.aal, 2);
    assert.deepEqual(claims.org_roles, ['admin', 'support']);
    assert.deepEqual(claims.tenant_roles, [{ tenant: 'child', roles: ['admin', 'support'] }]);
    assert.deepEqual(claims.scope, []);
    const { rows } = await tdb.db.query<{ subject_type: string; subject_id: string; jti: string }>(
      'SELECT subject_type, subject_id, jti FROM sessions WHERE id = $1',
      [t.sessionId],
    );
    assert.deepEqual(rows[0], { subject_type: 'user', subject_id: userId, jti: claims.jti });
    assert.equal(t.tokenType, 'Bearer');
  });

  it('refuses an inactive or deleted member', async () => {
    await tdb.db.query('UPDATE staff_users SET active = false WHERE id = $1', [userId]);
    await assert.rejects(
      startStaffSession(
        tdb.db,
        keys,
        { tenantId: 'op', userId, aal: 1, amr: ['fed'], ip: undefined, method: 'federation' },
        Date.now(),
      ),
    );
    await tdb.db.query('UPDATE staff_users SET active = true, deleted_at = now() WHERE id = $1', [userId]);
    await assert.rejects(
      startStaffSession(
        tdb.db,
        keys,
        { tenantId: 'op', userId, aal: 1, amr: ['fed'], ip: undefined, method: 'federation' },
        Date.now(),
      ),
    );
  });
});
