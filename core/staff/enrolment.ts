/**
 * One-time enrolment links (issue 16 item 1): how a staff member registers a passkey. Created
 * when a user is provisioned (SCIM's "user provisioned" hook calls createEnrolmentLink) or
 * re-issued by an Admin at AAL 2 for a lost passkey; valid 24 hours, single use, shown once to
 * whoever created it (there is no mail sender), stored as a SHA-256 hash, audited. A new link
 * replaces the user's earlier unused ones. The token travels in the URL fragment
 * (`/staff#enrol=…`), which browsers never send to a server, so it stays out of access logs.
 */
import { createHash, randomBytes } from 'node:crypto';
import { appendAudit } from '../../shared/audit.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { staffUserById, type StaffUser } from './store.ts';

export const enrolmentTtlMs = 24 * 60 * 60_000;
export const enrolmentTokenPrefix = 'enr_';
/** Where the sign-in page lives (core/staff/page.ts; public at the edge). */
export const staffPagePath = '/staff';

const hashOf = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

export interface EnrolmentLink {
  id: string;
  userId: string;
  /** Shown once: only its hash is kept. */
  token: string;
  /** The page path with the token in the fragment; prefix with the public origin staff use. */
  path: string;
  expiresAt: string;
}

/**
 * Create a link for an active staff member of `tenantId` (caller's transaction), revoking their
 * earlier unused links; `actor` is who asked (an Admin, the SCIM client, the bootstrap).
 */
export async function createEnrolmentLink(
  q: TxClient,
  tenantId: string,
  userId: string,
  actor: { type: string; id: string },
  now: number = Date.now(),
): Promise<EnrolmentLink> {
  const user = await staffUserById(q, tenantId, userId);
  if (!user || user.deletedAt) throw new AppError('NOT_FOUND', 'no such staff member');
  if (!user.active) throw new AppError('CONFLICT', 'the staff member is deactivated');
  const token = `${enrolmentTokenPrefix}${randomBytes(32).toString('base64url')}`;
  const id = uuidv7(now);
  const expiresAt = new Date(now + enrolmentTtlMs);
  const replaced = await q.query(
    `UPDATE staff_enrolment_links SET revoked_at = to_timestamp($3 / 1000.0)
     WHERE tenant_id = $1 AND user_id = $2 AND used_at IS NULL AND revoked_at IS NULL RETURNING id`,
    [tenantId, userId, now],
  );
  await q.query(
    `INSERT INTO staff_enrolment_links (tenant_id, id, user_id, token_hash, created_by, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), $7)`,
    [tenantId, id, userId, hashOf(token), `${actor.type}:${actor.id}`, now, expiresAt],
  );
  await appendAudit(q, [
    {
      tenantId,
      actor,
      action: 'staff.enrolment_link.create',
      target: { type: 'staff_user', id: userId },
      decision: { allow: true },
      attrs: { link: id, expires_at: expiresAt.toISOString(), replaced: replaced.rows.length },
      ts: new Date(now),
    },
  ]);
  return { id, userId, token, path: enrolmentPath(tenantId, token), expiresAt: expiresAt.toISOString() };
}

export const enrolmentPath = (tenantId: string, token: string): string =>
  `${staffPagePath}#tenant=${encodeURIComponent(tenantId)}&enrol=${encodeURIComponent(token)}`;

export interface LiveLink {
  id: string;
  user: StaffUser;
}

/**
 * The live link behind `token` in `tenantId`, or 401 ENROLMENT_INVALID: unknown, another
 * tenant's, expired, used, replaced, or its user deactivated or deleted (one answer for all,
 * so a guesser learns nothing). `lock` holds the row for the transaction that uses it.
 */
export async function liveLink(
  q: Queryable,
  tenantId: string,
  token: string,
  now: number,
  lock = false,
): Promise<LiveLink> {
  const { rows } = await q.query<{ id: string; user_id: string }>(
    `SELECT id, user_id FROM staff_enrolment_links
     WHERE tenant_id = $1 AND token_hash = $2 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > to_timestamp($3 / 1000.0)${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, hashOf(token), now],
  );
  const row = rows[0];
  const user = row ? await staffUserById(q, tenantId, row.user_id) : undefined;
  if (!row || !user || user.deletedAt || !user.active)
    throw new AppError(
      'ENROLMENT_INVALID',
      'this enrolment link is not valid: it may have expired or been used; ask an Admin for a new one',
    );
  return { id: row.id, user };
}

/** Mark the link used (inside the transaction that stores the passkey). */
export async function useLink(q: Queryable, tenantId: string, id: string, now: number): Promise<void> {
  await q.query(
    'UPDATE staff_enrolment_links SET used_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
    [tenantId, id, now],
  );
}
