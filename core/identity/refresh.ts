/**
 * Refresh-token rotation (SPEC 2.4.1, issue 3 item 6). Guarantees:
 * - A refresh token works once: it is marked rotated and a new one of the same family issued.
 * - Presenting a rotated token again is replay: the whole family and its session are revoked
 *   (NOTIFY, outbox, audit) and the answer is 401, also for the legitimate holder.
 * - The session's idle timeout (SPEC 2.10 session_timeout_minutes) is enforced here.
 * - A session still owing its MFA (mfa_required_for_all_users) cannot be refreshed.
 * - Refreshed customer tokens are AAL 1 (amr ["pin"]): a step-up lasts one access token (~10 min, SPEC 8).
 * - A refresh token serves the kind of session it was issued for (customer here, staff at
 *   /auth/token: core/staff/refresh.ts), never the other.
 * - Wrong refresh tokens count against the source address like failed sign-ins (SPEC 8,
 *   issue 14 item 5: brute-force protection on every credential a person can present).
 * - Proof of possession (issue 17 item 3, one rule for customers, agents and staff): a session
 *   bound to a DPoP key refreshes only with a proof by that key; a proof on an unbound session
 *   binds it; `require_dpop` tenants refuse a refresh without a proof.
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import { addressCheck } from './address-throttle.ts';
import { auditAuth, clientIpOf, type IdentityDeps } from './context.ts';
import { insertRefreshToken, revokeSession } from './sessions.ts';
import { tenantSettings } from './settings.ts';
import { admitAll, refusalError, settleFailure } from './throttle.ts';
import { accessTtlS, hashRefreshToken, issueAccessToken } from './tokens.ts';
import { dpopRefusal, sessionKey, signInBinding } from '../http/dpop.ts';

/** What differs between the kinds of session a refresh token can belong to. */
export interface RefreshKind {
  /** sessions.subject_type the token must belong to. */
  subjectType: 'customer' | 'user';
  /** The audit actor's type for the session's subject. */
  actorType: string;
  /**
   * The next access token of the session (caller's transaction). Undefined refuses the refresh
   * (e.g. a staff member deprovisioned since sign-in); the session is then revoked.
   */
  issue(
    q: Queryable,
    s: {
      tenantId: string;
      subjectId: string;
      sessionId: string;
      aal: number;
      amr: string[] | null;
      cnf: { jkt: string } | undefined;
    },
    now: number,
  ): Promise<{ token: string; jti: string; aal: number; expiresIn: number } | undefined>;
}

/** Customers: the next token is AAL 1 (a step-up lasts one access token). */
const customerKind = (deps: IdentityDeps): RefreshKind => ({
  subjectType: 'customer',
  actorType: 'customer',
  issue: async (_q, s, t) => {
    const a = await issueAccessToken(
      deps.keys,
      {
        tenantId: s.tenantId,
        sub: s.subjectId,
        sid: s.sessionId,
        aal: 1,
        amr: ['pin'],
        ...(s.cnf ? { cnf: s.cnf } : {}),
      },
      t,
    );
    return { ...a, aal: 1, expiresIn: accessTtlS };
  },
});

interface TokenRow {
  id: string;
  session_id: string;
  family_id: string;
  expires_at: Date;
  rotated_at: Date | null;
  revoked_at: Date | null;
  subject_id: string;
  last_seen: Date;
  session_revoked_at: Date | null;
  mfa_pending: boolean;
  aal: number;
  amr: string[] | null;
  dpop_jkt: string | null;
}

export interface RefreshResult {
  accessToken: string;
  refreshToken: string;
  expiresIn: number;
  tokenType: 'Bearer' | 'DPoP';
  sessionId: string;
  aal: number;
}

type Refusal = 'INVALID_REFRESH_TOKEN' | 'MFA_REQUIRED' | 'DPOP';
type Outcome = { kind: 'ok'; result: RefreshResult } | { kind: 'refused'; code: Refusal };

const invalidRefresh = () =>
  new AppError('INVALID_REFRESH_TOKEN', 'refresh token is invalid, expired or revoked');

/** A customer's refresh (POST /customers/auth/token/refresh). */
export function refresh(
  deps: IdentityDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  tenantId: string,
  token: string,
): Promise<RefreshResult> {
  return rotateRefreshToken(deps, ctx, tenantId, token, customerKind(deps));
}

export async function rotateRefreshToken(
  deps: IdentityDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  tenantId: string,
  token: string,
  kind: RefreshKind,
): Promise<RefreshResult> {
  const settings = await tenantSettings(deps.db, tenantId);
  const secrets = settings?.active ? await deps.secrets.get(tenantId) : undefined;
  if (!settings?.active || !secrets) throw invalidRefresh();
  const pop = await signInBinding(deps, ctx, settings);
  const t = deps.now();
  const ip = clientIpOf(ctx);
  const checks = [addressCheck(secrets, tenantId, ip, settings.addressThrottle)];
  const gate = await deps.db.tx((q) => admitAll(q, tenantId, checks, t));
  if (!gate.ok) throw refusalError(gate);
  const env: Rotation = { ctx, tenantId, kind, checks, ip, t, settings, pop };
  const outcome: Outcome = await deps.db.tx((q) => rotateInTx(q, env, token));
  if (outcome.kind === 'refused') throw refusalOf(deps, outcome.code);
  return outcome.result;
}

/** What one refresh attempt knows before it reads the token (fixed once the address is admitted). */
interface Rotation {
  ctx: RequestContext<unknown, unknown, unknown>;
  tenantId: string;
  kind: RefreshKind;
  checks: ReturnType<typeof addressCheck>[];
  ip: string;
  t: number;
  settings: NonNullable<Awaited<ReturnType<typeof tenantSettings>>>;
  pop: Awaited<ReturnType<typeof signInBinding>>;
}

type Note = (allow: boolean, outcome: string) => Promise<void>;

const refused = (code: Refusal = 'INVALID_REFRESH_TOKEN'): Outcome => ({ kind: 'refused', code });

/** The refresh inside its transaction: the token and session locked, judged, then rotated. */
async function rotateInTx(q: TxClient, env: Rotation, token: string): Promise<Outcome> {
  const { tenantId, kind, checks, ip, t, ctx } = env;
  const { rows } = await q.query<TokenRow>(
    `SELECT r.id, r.session_id, r.family_id, r.expires_at, r.rotated_at, r.revoked_at,
              s.subject_id, s.last_seen, s.revoked_at AS session_revoked_at, s.mfa_pending, s.aal, s.amr, s.dpop_jkt
       FROM refresh_tokens r JOIN sessions s ON s.tenant_id = r.tenant_id AND s.id = r.session_id
       WHERE r.tenant_id = $1 AND r.token_hash = $2 AND s.subject_type = $3 FOR UPDATE OF r, s`,
    [tenantId, hashRefreshToken(token), kind.subjectType],
  );
  const r = rows[0];
  if (!r) {
    // A token nobody holds: counted against the address (a guess, or a token of another kind).
    await settleFailure(q, tenantId, checks, t);
    await auditAuth(
      q,
      {
        tenantId,
        action: 'auth.refresh',
        actor: { type: 'anonymous', id: ip },
        target: { type: 'session', id: 'unknown' },
        allow: false,
        attrs: { ip, outcome: 'unknown_token' },
        requestId: ctx.requestId,
      },
      t,
    );
    return refused();
  }
  const actor = { type: kind.actorType, id: r.subject_id };
  const target = { type: 'session', id: r.session_id };
  const note: Note = (allow, outcome) =>
    auditAuth(
      q,
      {
        tenantId,
        action: 'auth.refresh',
        actor,
        target,
        allow,
        attrs: { ip, outcome, family: r.family_id },
        requestId: ctx.requestId,
      },
      t,
    );
  return (await refusalOfSession(q, env, r, note)) ?? (await rotate(q, env, r, note));
}

/** Replay, revocation, expiry, idle timeout and owed MFA, in that order; undefined when none. */
async function refusalOfSession(
  q: TxClient,
  env: Rotation,
  r: TokenRow,
  note: Note,
): Promise<Outcome | undefined> {
  const { tenantId, t, settings } = env;
  if (r.rotated_at) {
    await q.query(
      `UPDATE refresh_tokens SET revoked_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND family_id = $2 AND revoked_at IS NULL`,
      [tenantId, r.family_id, t],
    );
    await revokeSession(q, tenantId, r.session_id, 'refresh_replay', { type: 'system', id: 'identity' }, t);
    await note(false, 'replay_detected_family_revoked');
    return refused();
  }
  if (r.revoked_at || r.session_revoked_at || r.expires_at.getTime() <= t) {
    await note(false, 'revoked_or_expired');
    return refused();
  }
  if (t - r.last_seen.getTime() > settings.sessionTimeoutMinutes * 60_000) {
    await revokeSession(q, tenantId, r.session_id, 'idle_timeout', { type: 'system', id: 'identity' }, t);
    await note(false, 'idle_timeout');
    return refused();
  }
  if (r.mfa_pending) {
    await note(false, 'mfa_pending');
    return refused('MFA_REQUIRED');
  }
  return undefined;
}

/** The proof's key checked, the next access token issued, the token rotated and the session touched. */
async function rotate(q: TxClient, env: Rotation, r: TokenRow, note: Note): Promise<Outcome> {
  const { tenantId, kind, ip, t, pop } = env;
  const key = sessionKey(r.dpop_jkt, pop);
  if (!key.ok) {
    await note(false, 'dpop_key_mismatch');
    return refused('DPOP');
  }
  const cnf = key.jkt ? { jkt: key.jkt } : undefined;
  const access = await kind.issue(
    q,
    { tenantId, subjectId: r.subject_id, sessionId: r.session_id, aal: r.aal, amr: r.amr, cnf },
    t,
  );
  if (!access) {
    await revokeSession(q, tenantId, r.session_id, 'subject_inactive', { type: 'system', id: 'identity' }, t);
    await note(false, 'subject_inactive');
    return refused();
  }
  await q.query(
    'UPDATE refresh_tokens SET rotated_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
    [tenantId, r.id, t],
  );
  const next = await insertRefreshToken(q, tenantId, r.session_id, r.family_id, t, r.expires_at.getTime());
  await q.query(
    `UPDATE sessions SET jti = $3, aal = $6, last_seen = to_timestamp($4 / 1000.0), ip = $5, dpop_jkt = $7 WHERE tenant_id = $1 AND id = $2`,
    [tenantId, r.session_id, access.jti, t, ip, access.aal, key.jkt ?? null],
  );
  await note(true, 'rotated');
  return {
    kind: 'ok',
    result: {
      accessToken: access.token,
      refreshToken: next,
      expiresIn: access.expiresIn,
      tokenType: cnf ? 'DPoP' : 'Bearer',
      sessionId: r.session_id,
      aal: access.aal,
    },
  };
}

/** The error a refused refresh answers with (after the transaction has committed its audit). */
function refusalOf(deps: IdentityDeps, code: Refusal): AppError {
  if (code === 'DPOP')
    return dpopRefusal(
      deps,
      'invalid_dpop_proof',
      'this refresh token is bound to a DPoP key: send a proof by it',
    );
  return code === 'MFA_REQUIRED'
    ? new AppError('MFA_REQUIRED', 'complete the step-up this session owes before refreshing')
    : invalidRefresh();
}
