/**
 * A staff member's passkeys (issue 16 item 1): several per person, each named; the person lists,
 * renames and removes their own. Every change is audited naming the person. A removed passkey
 * is deleted: it can no longer sign in or step up.
 */
import { appendAudit } from '../../shared/audit.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { uuidText, uuidv7 } from '../../shared/uuid.ts';
import { staffSubject } from './store.ts';
import type { NewCredential, StoredCredential } from './webauthn.ts';

export interface PasskeyView {
  id: string;
  name: string;
  createdAt: string;
  lastUsedAt: string | null;
  backedUp: boolean;
}

interface Row {
  tenant_id: string;
  id: string;
  user_id: string;
  credential_id: string;
  public_key: Buffer;
  counter: string;
  transports: string[];
  name: string;
  backed_up: boolean;
  created_at: Date;
  last_used_at: Date | null;
}

export interface Passkey extends StoredCredential {
  tenantId: string;
  id: string;
  userId: string;
}

const toPasskey = (r: Row): Passkey => ({
  tenantId: r.tenant_id,
  id: r.id,
  userId: r.user_id,
  credentialId: r.credential_id,
  publicKey: r.public_key,
  counter: Number(r.counter),
  transports: r.transports,
});

export async function passkeyByCredential(
  q: Queryable,
  tenantId: string,
  credentialId: string,
): Promise<Passkey | undefined> {
  const { rows } = await q.query<Row>(
    'SELECT * FROM staff_passkeys WHERE tenant_id = $1 AND credential_id = $2',
    [tenantId, credentialId],
  );
  return rows[0] ? toPasskey(rows[0]) : undefined;
}

export async function passkeysOf(
  q: Queryable,
  tenantId: string,
  userId: string,
): Promise<(Passkey & { view: PasskeyView })[]> {
  const { rows } = await q.query<Row>(
    'SELECT * FROM staff_passkeys WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id',
    [tenantId, userId],
  );
  return rows.map((r) => ({
    ...toPasskey(r),
    view: {
      id: r.id,
      name: r.name,
      createdAt: r.created_at.toISOString(),
      lastUsedAt: r.last_used_at?.toISOString() ?? null,
      backedUp: r.backed_up,
    },
  }));
}

export async function addPasskey(
  q: Queryable,
  tenantId: string,
  userId: string,
  c: NewCredential,
  name: string,
  now: number,
): Promise<string> {
  const id = uuidv7(now);
  await q.query(
    `INSERT INTO staff_passkeys (tenant_id, id, user_id, credential_id, public_key, counter, transports, name, aaguid, backed_up, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, to_timestamp($11 / 1000.0))`,
    [
      tenantId,
      id,
      userId,
      c.credentialId,
      c.publicKey,
      c.counter,
      c.transports,
      name,
      c.aaguid,
      c.backedUp,
      now,
    ],
  );
  return id;
}

/**
 * Record a verified assertion's counter, only if nobody recorded another since it was read: of
 * two concurrent uses of one assertion, one wins and the other is refused as a replay.
 */
export async function recordUse(q: Queryable, p: Passkey, newCounter: number, now: number): Promise<boolean> {
  const { rows } = await q.query(
    `UPDATE staff_passkeys SET counter = $4, last_used_at = to_timestamp($5 / 1000.0)
     WHERE tenant_id = $1 AND id = $2 AND counter = $3 RETURNING id`,
    [p.tenantId, p.id, p.counter, newCounter, now],
  );
  return rows.length > 0;
}

export async function auditPasskey(
  q: TxClient,
  tenantId: string,
  userId: string,
  action: string,
  passkeyId: string,
  attrs: Record<string, unknown>,
  now: number,
): Promise<void> {
  await appendAudit(q, [
    {
      tenantId,
      actor: { type: 'staff', id: staffSubject(userId) },
      action,
      target: { type: 'passkey', id: passkeyId },
      decision: { allow: true },
      attrs,
      ts: new Date(now),
    },
  ]);
}

/** Rename one of the person's own passkeys; false when it is not theirs. */
export async function renamePasskey(
  q: TxClient,
  tenantId: string,
  userId: string,
  id: string,
  name: string,
  requestId: string,
  now: number,
): Promise<boolean> {
  if (!uuidText.test(id)) return false;
  const { rows } = await q.query(
    'UPDATE staff_passkeys SET name = $4 WHERE tenant_id = $1 AND user_id = $2 AND id = $3 RETURNING id',
    [tenantId, userId, id, name],
  );
  if (rows.length === 0) return false;
  await auditPasskey(q, tenantId, userId, 'staff.passkey.rename', id, { requestId, name }, now);
  return true;
}

/** Remove one of the person's own passkeys; false when it is not theirs. */
export async function removePasskey(
  q: TxClient,
  tenantId: string,
  userId: string,
  id: string,
  requestId: string,
  now: number,
): Promise<boolean> {
  if (!uuidText.test(id)) return false;
  const { rows } = await q.query(
    'DELETE FROM staff_passkeys WHERE tenant_id = $1 AND user_id = $2 AND id = $3 RETURNING id',
    [tenantId, userId, id],
  );
  if (rows.length === 0) return false;
  await auditPasskey(q, tenantId, userId, 'staff.passkey.remove', id, { requestId }, now);
  return true;
}
