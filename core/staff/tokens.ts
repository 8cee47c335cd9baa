/**
 * Staff sessions and access tokens (issue 14 item 2; SPEC 2.4.1 internal claims). Every way a
 * staff member signs in (federation, passkey) ends here: one session (subject_type 'user'), one
 * refresh family, and an EdDSA access token signed with the tenant's key:
 *   sub (staff user id), tid, sid, jti, aal (1 | 2), amr, scope[] (empty: people are governed
 *   by roles, not scopes), org_roles[] (roles in the member's own tenant), tenant_roles[]
 *   ({tenant, roles[]} for each tenant the member's tenant owns: a platform operator's staff
 *   hold their roles there too), typ "at+jwt", aud "staff", optional cnf (proof of possession).
 */
import { accessTokenTyp, staffAudience } from '../../shared/access-token.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import type { KeyStore } from '../keys/keys.ts';
import { insertRefreshToken, sessionMaxAgeMs } from '../identity/sessions.ts';
import { staffUserById, type StaffRole } from './store.ts';

export { staffAudience };
export const staffTokenTyp = accessTokenTyp;
/** SPEC 8: access tokens live 5–10 minutes. */
export const staffAccessTtlS = 600;

export interface StaffTokenClaims {
  tenantId: string;
  userId: string;
  sessionId: string;
  aal: 1 | 2;
  amr: string[];
  orgRoles: StaffRole[];
  tenantRoles: { tenant: string; roles: StaffRole[] }[];
  cnf?: Record<string, unknown>;
  /** After a step-up: the request the AAL 2 token was issued for. */
  orig?: string;
}

export async function issueStaffAccessToken(
  keys: KeyStore,
  c: StaffTokenClaims,
  now: number,
): Promise<{ token: string; jti: string }> {
  const jti = uuidv7(now);
  const claims: Record<string, unknown> = {
    sub: c.userId,
    sid: c.sessionId,
    jti,
    aal: c.aal,
    amr: c.amr,
    aud: staffAudience,
    scope: [],
    org_roles: c.orgRoles,
    tenant_roles: c.tenantRoles,
  };
  if (c.cnf) claims.cnf = c.cnf;
  if (c.orig) claims.orig = c.orig;
  return {
    token: await keys.sign(c.tenantId, claims, { expiresInS: staffAccessTtlS, typ: staffTokenTyp }),
    jti,
  };
}

/** The tenants `tenantId` owns (relationship tuples `tenant:<owner> owner tenant:<t>`). */
export async function ownedTenants(q: Queryable, tenantId: string): Promise<string[]> {
  const { rows } = await q.query<{ object_id: string }>(
    `SELECT object_id FROM relationship_tuples
     WHERE tenant_id = $1 AND subject_ns = 'tenant' AND subject_id = $1 AND relation = 'owner' AND object_ns = 'tenant'
       AND object_id <> $1 ORDER BY object_id`,
    [tenantId],
  );
  return rows.map((r) => r.object_id);
}

export interface StaffSignIn {
  tenantId: string;
  userId: string;
  aal: 1 | 2;
  amr: string[];
  ip: string | undefined;
  /** What signed in: 'federation', 'passkey' (recorded as the session's device). */
  method: string;
  cnf?: Record<string, unknown>;
}

export interface StaffTokens {
  accessToken: string;
  refreshToken: string;
  tokenType: 'Bearer' | 'DPoP';
  expiresIn: number;
  sessionId: string;
  aal: number;
}

/**
 * An access token for a member's session (caller's transaction) with the roles the member holds
 * now: sign-in and every refresh read them afresh, so a role removed by SCIM is gone from the
 * next token. Undefined when the member is unknown, deleted or inactive.
 */
export async function staffAccessToken(
  q: Queryable,
  keys: KeyStore,
  s: {
    tenantId: string;
    userId: string;
    sessionId: string;
    aal: 1 | 2;
    amr: string[];
    cnf?: Record<string, unknown> | undefined;
    orig?: string | undefined;
  },
  now: number,
): Promise<{ token: string; jti: string } | undefined> {
  const user = await staffUserById(q, s.tenantId, s.userId);
  if (!user || user.deletedAt || !user.active) return undefined;
  const tenantRoles =
    user.roles.length === 0
      ? []
      : (await ownedTenants(q, s.tenantId)).map((tenant) => ({ tenant, roles: user.roles }));
  return issueStaffAccessToken(
    keys,
    {
      tenantId: s.tenantId,
      userId: s.userId,
      sessionId: s.sessionId,
      aal: s.aal,
      amr: s.amr,
      orgRoles: user.roles,
      tenantRoles,
      ...(s.cnf ? { cnf: s.cnf } : {}),
      ...(s.orig ? { orig: s.orig } : {}),
    },
    now,
  );
}

/**
 * After a step-up (issue 16 item 2): an AAL 2 token for the member's existing session, bound to
 * the request `orig` names; the session records the new token (caller's transaction). Throws
 * when the session is no longer live.
 */
export async function stepUpStaffSession(
  q: Queryable,
  keys: KeyStore,
  s: {
    tenantId: string;
    userId: string;
    sessionId: string;
    amr: string[];
    orig: string;
    cnf?: Record<string, unknown>;
  },
  now: number,
): Promise<{ accessToken: string; expiresIn: number; aal: 2 }> {
  const access = await staffAccessToken(q, keys, { ...s, aal: 2 }, now);
  if (!access) throw new Error('staff member is not active');
  // The session keeps its sign-in AAL: the step-up lasts this one request-bound token, and a
  // refresh never turns it into a standing AAL 2 (issue 16 item 2).
  const { rows } = await q.query(
    `UPDATE sessions SET jti = $4, last_seen = to_timestamp($5 / 1000.0)
     WHERE tenant_id = $1 AND id = $2 AND subject_type = 'user' AND subject_id = $3 AND revoked_at IS NULL RETURNING id`,
    [s.tenantId, s.sessionId, s.userId, access.jti, now],
  );
  if (rows.length === 0) throw new Error('staff session is not live');
  return { accessToken: access.token, expiresIn: staffAccessTtlS, aal: 2 };
}

/**
 * Start a session for an active staff member and issue its tokens (caller's transaction).
 * Throws when the member is unknown, deleted or inactive: callers check first and answer
 * with their own refusal; this is the last guard.
 */
export async function startStaffSession(
  q: Queryable,
  keys: KeyStore,
  s: StaffSignIn,
  now: number,
): Promise<StaffTokens> {
  const sessionId = uuidv7(now);
  const access = await staffAccessToken(
    q,
    keys,
    {
      tenantId: s.tenantId,
      userId: s.userId,
      sessionId,
      aal: s.aal,
      amr: s.amr,
      ...(s.cnf ? { cnf: s.cnf } : {}),
    },
    now,
  );
  if (!access) throw new Error('staff member is not active');
  await q.query(
    `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, amr, mfa_pending, device, ip, created_at, last_seen, dpop_jkt)
     VALUES ($1, $2, 'user', $3, $4, $5, $6, false, $7, $8, to_timestamp($9 / 1000.0), to_timestamp($9 / 1000.0), $10)`,
    [
      sessionId,
      s.tenantId,
      s.userId,
      access.jti,
      s.aal,
      s.amr,
      s.method,
      s.ip ?? null,
      now,
      typeof s.cnf?.jkt === 'string' ? s.cnf.jkt : null,
    ],
  );
  const refreshToken = await insertRefreshToken(
    q,
    s.tenantId,
    sessionId,
    uuidv7(now),
    now,
    now + sessionMaxAgeMs,
  );
  return {
    accessToken: access.token,
    refreshToken,
    tokenType: s.cnf ? 'DPoP' : 'Bearer',
    expiresIn: staffAccessTtlS,
    sessionId,
    aal: s.aal,
  };
}
