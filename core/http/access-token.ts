/**
 * Core's re-check of a bearer access token (defence in depth: the edge checked it first), through
 * the one verifier of shared/access-token.ts, so a refusal has the same code here as at the edge
 * (the table there). Added here: agreement with the identity headers the edge set, and the
 * session as core's table holds it, idle timeout included: the edge holds last-seen and writes
 * it at most a second late, so core judges it with a minute's slack (never stricter than the
 * edge; on the routes the edge passes to core unchecked, the rule the edge would apply).
 */
import type { Queryable } from '../../shared/db/pool.ts';
import {
  checkSession,
  defaultSessionTimeoutMin,
  TokenRefusal,
  verifyAccessToken,
  type TokenKind,
} from '../../shared/access-token.ts';
import { AppError } from '../../shared/errors.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { EdgeIdentity } from './route.ts';

/** The same refusal as an AppError: the code is the table's, on core's error body. */
export function tokenError(err: unknown): unknown {
  return err instanceof TokenRefusal ? new AppError(err.code, err.message) : err;
}

/**
 * Verify the request's token as a `kind` token and its agreement with the edge's identity
 * headers: another tenant is 403 TENANT_MISMATCH; for customers and agents another principal is
 * 401 invalid_token.
 */
export async function verifiedToken<K extends TokenKind>(
  keys: KeyStore,
  ctx: { headers: Readonly<Record<string, string>>; identity: EdgeIdentity },
  kind: K,
  nowMs: number,
): ReturnType<typeof verifyAccessToken<K>> {
  let verified: Awaited<ReturnType<typeof verifyAccessToken<K>>>;
  try {
    verified = await verifyAccessToken(keys, ctx.headers.authorization, kind, nowMs);
  } catch (err) {
    throw tokenError(err);
  }
  const { tenantId, principalId } = ctx.identity;
  if (tenantId !== undefined && tenantId !== verified.claims.tid)
    throw new AppError('TENANT_MISMATCH', 'access token belongs to another tenant');
  if (
    (kind === 'customer' || kind === 'agent') &&
    principalId !== undefined &&
    principalId !== verified.claims.sub
  )
    throw new AppError('invalid_token', 'access token does not match the authenticated principal');
  return verified;
}

/** How late core may see the edge's last-seen (edge/state/store.ts writes it every second). */
export const lastSeenSlackMs = 60_000;

/**
 * The session rule of shared/access-token.ts on the session row core holds: 401 session_revoked,
 * or session_expired past the tenant's idle timeout (SPEC 2.10 session_timeout_minutes).
 */
export async function requireLiveSession(
  q: Queryable,
  kind: 'customer' | 'agent' | 'staff',
  claims: { tid: string; sid: string; sub: string },
  nowMs: number,
): Promise<void> {
  const { rows } = await q.query<{
    subject_type: string;
    subject_id: string;
    revoked: boolean;
    last_seen: Date;
    timeout: string | null;
  }>(
    `SELECT s.subject_type, s.subject_id, s.revoked_at IS NOT NULL AS revoked, s.last_seen,
            t.security->>'session_timeout_minutes' AS timeout
       FROM sessions s JOIN tenants t ON t.id = s.tenant_id WHERE s.tenant_id = $1 AND s.id = $2`,
    [claims.tid, claims.sid],
  );
  const row = rows[0];
  const timeoutMin = Number(row?.timeout ?? defaultSessionTimeoutMin);
  try {
    checkSession(
      row && {
        subjectType: row.subject_type,
        subjectId: row.subject_id,
        revoked: row.revoked,
        lastSeenMs: row.last_seen.getTime() + lastSeenSlackMs,
      },
      kind,
      claims.sub,
      Number.isFinite(timeoutMin) && timeoutMin > 0 ? { nowMs, timeoutMin } : undefined,
    );
  } catch (err) {
    throw tokenError(err);
  }
}
