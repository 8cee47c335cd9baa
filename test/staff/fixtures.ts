/** Staff members and their tokens for tests: provisioned as SCIM would, signed in as any method would. */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { Queryable } from '../../shared/db/pool.ts';
import { loadOrCreateMasterKey } from '../../shared/sealing.ts';
import type { Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { setStaffRoles, type StaffRole } from '../../core/staff/store.ts';
import { issueStaffAccessToken, startStaffSession, type StaffTokens } from '../../core/staff/tokens.ts';
import { origOf } from '../../shared/challenge.ts';

/** The stack's own KeyStore (its development master key in DATA_DIR/master.key). */
export async function stackKeys(db: Db, dataDir: string): Promise<KeyStore> {
  return new KeyStore(db, await loadOrCreateMasterKey(undefined, join(dataDir, 'master.key')));
}

export async function addStaff(
  q: Queryable,
  tenantId: string,
  userName: string,
  roles: StaffRole[],
  externalId?: string,
): Promise<string> {
  const id = randomUUID();
  await q.query('INSERT INTO staff_users (tenant_id, id, user_name, external_id) VALUES ($1, $2, $3, $4)', [
    tenantId,
    id,
    userName,
    externalId ?? null,
  ]);
  await setStaffRoles(q, tenantId, id, roles);
  return id;
}

export function signIn(
  db: Db,
  keys: KeyStore,
  tenantId: string,
  userId: string,
  aal: 1 | 2 = 1,
): Promise<StaffTokens> {
  return db.tx((q) =>
    startStaffSession(
      q,
      keys,
      {
        tenantId,
        userId,
        aal,
        amr: aal === 2 ? ['fed', 'mfa'] : ['fed'],
        ip: '127.0.0.1',
        method: 'federation',
      },
      Date.now(),
    ),
  );
}

export async function addTenant(q: Queryable, id: string, owner?: string): Promise<void> {
  await q.query(
    `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES') ON CONFLICT DO NOTHING`,
    [id],
  );
  if (owner) {
    await q.query(
      `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
                   VALUES ($1, 'tenant', $1, 'owner', 'tenant', $2)`,
      [owner, id],
    );
    await q.query('INSERT INTO admin_tenant_owners (tenant_id, owner_tenant_id) VALUES ($1, $2)', [
      id,
      owner,
    ]);
  }
}

/** An Admin's AAL 2 token for one request (what a passkey step-up issues), bound to `method path body`. */
export async function adminStepUpToken(
  keys: KeyStore,
  s: { tenantId: string; userId: string; sessionId: string },
  method: string,
  path: string,
  body: unknown,
): Promise<string> {
  const orig = origOf(method, path, JSON.stringify(body));
  const claims = { ...s, aal: 2 as const, amr: ['hwk'], orgRoles: ['admin' as const], tenantRoles: [], orig };
  return (await issueStaffAccessToken(keys, claims, Date.now())).token;
}
