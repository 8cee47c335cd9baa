/** A bench customer of a tenant: a live session at `aal`, its tenant membership, and its access token. */
import { randomUUID } from 'node:crypto';
import type { KeyStore } from '../../core/keys/keys.ts';
import type { Db } from '../../shared/db/pool.ts';

export async function benchCustomer(
  db: Db,
  keys: KeyStore,
  tenantId: string,
  opts: { phone: string; aal: number; amr: string[] },
): Promise<{ customerId: string; sid: string; token: string }> {
  const customerId = randomUUID();
  const sid = randomUUID();
  await db.query(`INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, $2, $3, now())`, [
    customerId,
    tenantId,
    opts.phone,
  ]);
  await db.query(
    `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, ip, created_at, last_seen) VALUES ($1, $2, 'customer', $3, 'j', $4, '127.0.0.1', now(), now())`,
    [sid, tenantId, customerId, opts.aal],
  );
  await db.query(
    `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id) VALUES ($1, 'customer', $2, 'member', 'tenant', $1)`,
    [tenantId, customerId],
  );
  const token = await keys.sign(
    tenantId,
    { sub: customerId, sid, aal: opts.aal, amr: opts.amr, jti: randomUUID(), aud: 'payments-api' },
    { expiresInS: 3600, typ: 'at+jwt' },
  );
  return { customerId, sid, token };
}
