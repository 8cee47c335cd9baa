/**
 * Sessions and refresh-token families (SPEC 2.4.1). A login creates one session and one
 * refresh family; every revocation sets revoked_at (the table trigger NOTIFYs
 * 'sessions_changed' with {tenantId, sessionId} in the same transaction), revokes the family,
 * writes a `session.revoked` outbox event and an audit record.
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { appendAudit } from '../../shared/audit.ts';
import { enqueue } from '../outbox/outbox.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { newRefreshToken } from './tokens.ts';

/** Refresh tokens (and so sessions) end at the latest this long after login. */
export const sessionMaxAgeMs = 30 * 24 * 60 * 60_000;

export interface NewSession {
  tenantId: string;
  customerId: string;
  jti: string;
  aal: number;
  mfaPending: boolean;
  device: string | undefined;
  ip: string | undefined;
  /** Thumbprint of the DPoP key the sign-in proved (issue 17 item 3); refresh needs it again. */
  dpopJkt?: string | undefined;
}

/** Insert the session and the first refresh token of its family; returns the token. */
export async function createSession(q: Queryable, id: string, s: NewSession, now: number): Promise<string> {
  await q.query(
    `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, mfa_pending, device, ip, created_at, last_seen, dpop_jkt)
     VALUES ($1, $2, 'customer', $3, $4, $5, $6, $7, $8, to_timestamp($9 / 1000.0), to_timestamp($9 / 1000.0), $10)`,
    [
      id,
      s.tenantId,
      s.customerId,
      s.jti,
      s.aal,
      s.mfaPending,
      s.device ?? null,
      s.ip ?? null,
      now,
      s.dpopJkt ?? null,
    ],
  );
  return insertRefreshToken(q, s.tenantId, id, uuidv7(now), now, now + sessionMaxAgeMs);
}

export async function insertRefreshToken(
  q: Queryable,
  tenantId: string,
  sessionId: string,
  familyId: string,
  now: number,
  expiresAt: number,
): Promise<string> {
  const { token, hash } = newRefreshToken();
  await q.query(
    `INSERT INTO refresh_tokens (id, tenant_id, session_id, family_id, token_hash, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0))`,
    [uuidv7(now), tenantId, sessionId, familyId, hash, now, expiresAt],
  );
  return token;
}

export type RevokeReason =
  | 'logout'
  | 'revoked_by_customer'
  | 'refresh_replay'
  | 'idle_timeout'
  | 'pin_reset'
  // a staff member deprovisioned since sign-in (refresh refused); an administrator's DELETE /sessions/{id}
  | 'subject_inactive'
  | 'revoked_by_admin';

/** Revoke a session and its refresh tokens; false when it was already revoked or is unknown. */
export async function revokeSession(
  q: TxClient,
  tenantId: string,
  sessionId: string,
  reason: RevokeReason,
  actor: { type: string; id: string },
  now: number,
): Promise<boolean> {
  const { rows } = await q.query<{ subject_id: string; subject_type: string }>(
    `UPDATE sessions SET revoked_at = to_timestamp($3 / 1000.0), revoke_reason = $4
     WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING subject_id, subject_type`,
    [tenantId, sessionId, now, reason],
  );
  const row = rows[0];
  if (!row) return false;
  await q.query(
    `UPDATE refresh_tokens SET revoked_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND session_id = $2 AND revoked_at IS NULL`,
    [tenantId, sessionId, now],
  );
  await enqueue(q, {
    tenantId,
    aggregate: 'session',
    aggregateId: sessionId,
    event: 'session.revoked',
    payload: { sessionId, subjectType: row.subject_type, subjectId: row.subject_id, reason },
  });
  await appendAudit(q, [
    {
      tenantId,
      actor,
      action: 'session.revoke',
      target: { type: 'session', id: sessionId },
      decision: { allow: true },
      attrs: { reason, subject: row.subject_id },
      ts: new Date(now),
    },
  ]);
  return true;
}

export interface SessionView {
  id: string;
  createdAt: string;
  lastSeen: string;
  aal: number;
  device: string | null;
  ip: string | null;
}

/** The customer's (or, with `subjectType` 'user', the staff member's) live sessions, newest first. */
export async function listSessions(
  q: Queryable,
  tenantId: string,
  customerId: string,
  subjectType: 'customer' | 'user' = 'customer',
): Promise<SessionView[]> {
  const { rows } = await q.query<{
    id: string;
    created_at: Date;
    last_seen: Date;
    aal: number;
    device: string | null;
    ip: string | null;
  }>(
    `SELECT id, created_at, last_seen, aal, device, ip FROM sessions
     WHERE tenant_id = $1 AND subject_type = $3 AND subject_id = $2 AND revoked_at IS NULL
     ORDER BY created_at DESC LIMIT 100`,
    [tenantId, customerId, subjectType],
  );
  return rows.map((r) => ({
    id: r.id,
    createdAt: r.created_at.toISOString(),
    lastSeen: r.last_seen.toISOString(),
    aal: r.aal,
    device: r.device,
    ip: r.ip,
  }));
}
