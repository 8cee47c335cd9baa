/**
 * Refresh-token rotation (SPEC 2.4.1, issue 3 item 6). Guarantees:
 * - A refresh token works once: it is marked rotated and a new one of the same family issued.
 * - Presenting a rotated token again is replay: the whole family and its session are revoked
 *   (NOTIFY, outbox, audit) and the answer is 401, also for the legitimate holder.
 * - The session's idle timeout (SPEC 2.10 session_timeout_minutes) is enforced here.
 * - A session still owing its MFA (mfa_required_for_all_users) cannot be refreshed.
 * - Refreshed tokens are AAL 1 (amr ["pin"]): a step-up lasts one access token (~10 min, SPEC 8).
 */
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import { auditAuth, clientIpOf, type IdentityDeps } from './context.ts';
import { insertRefreshToken, revokeSession } from './sessions.ts';
import { tenantSettings } from './settings.ts';
import { dpopBinding, dpopRefusal, requireProof, sessionKey } from '../http/dpop.ts';
import { accessTtlS, hashRefreshToken, issueAccessToken } from './tokens.ts';

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

type Outcome = { kind: 'ok'; result: RefreshResult } | { kind: 'refused'; code: 'INVALID_REFRESH_TOKEN' | 'MFA_REQUIRED' | 'DPOP' };

export async function refresh(deps: IdentityDeps, ctx: RequestContext<unknown, unknown, unknown>, tenantId: string, token: string): Promise<RefreshResult> {
  const settings = await tenantSettings(deps.db, tenantId);
  if (!settings?.active) throw new AppError('INVALID_REFRESH_TOKEN', 'refresh token is invalid, expired or revoked');
  const pop = await dpopBinding(deps, ctx, { requireNonce: settings.requireDpopNonce });
  if (settings.requireDpop) requireProof(pop, deps);
  const t = deps.now();
  const ip = clientIpOf(ctx);
  const outcome: Outcome = await deps.db.tx(async (q): Promise<Outcome> => {
    const { rows } = await q.query<TokenRow>(
      `SELECT r.id, r.session_id, r.family_id, r.expires_at, r.rotated_at, r.revoked_at,
              s.subject_id, s.last_seen, s.revoked_at AS session_revoked_at, s.mfa_pending, s.dpop_jkt
       FROM refresh_tokens r JOIN sessions s ON s.tenant_id = r.tenant_id AND s.id = r.session_id
       WHERE r.tenant_id = $1 AND r.token_hash = $2 FOR UPDATE OF r, s`,
      [tenantId, hashRefreshToken(token)],
    );
    const r = rows[0];
    const refused = (code: 'INVALID_REFRESH_TOKEN' | 'MFA_REQUIRED' | 'DPOP' = 'INVALID_REFRESH_TOKEN'): Outcome => ({ kind: 'refused', code });
    if (!r) return refused();
    const actor = { type: 'customer', id: r.subject_id };
    const target = { type: 'session', id: r.session_id };
    const note = (allow: boolean, outcome: string) => auditAuth(q, { tenantId, action: 'auth.refresh', actor, target, allow, attrs: { ip, outcome, family: r.family_id }, requestId: ctx.requestId }, t);
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
    const key = sessionKey(r.dpop_jkt, pop);
    if (!key.ok) {
      await note(false, 'dpop_key_mismatch');
      return refused('DPOP');
    }
    const cnf = key.jkt ? { jkt: key.jkt } : undefined;
    await q.query('UPDATE refresh_tokens SET rotated_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2', [tenantId, r.id, t]);
    const next = await insertRefreshToken(q, tenantId, r.session_id, r.family_id, t, r.expires_at.getTime());
    const access = await issueAccessToken(deps.keys, { tenantId, sub: r.subject_id, sid: r.session_id, aal: 1, amr: ['pin'], ...(cnf ? { cnf } : {}) }, t);
    await q.query(
      `UPDATE sessions SET jti = $3, aal = 1, last_seen = to_timestamp($4 / 1000.0), ip = $5, dpop_jkt = $6 WHERE tenant_id = $1 AND id = $2`,
      [tenantId, r.session_id, access.jti, t, ip, key.jkt ?? null],
    );
    await note(true, 'rotated');
    return { kind: 'ok', result: { accessToken: access.token, refreshToken: next, expiresIn: accessTtlS, tokenType: cnf ? 'DPoP' : 'Bearer', sessionId: r.session_id, aal: 1 } };
  });
  if (outcome.kind === 'refused') {
    if (outcome.code === 'DPOP') throw dpopRefusal(deps, 'invalid_dpop_proof', 'this refresh token is bound to a DPoP key: send a proof by it');
    throw outcome.code === 'MFA_REQUIRED'
      ? new AppError('MFA_REQUIRED', 'complete the step-up this session owes before refreshing')
      : new AppError('INVALID_REFRESH_TOKEN', 'refresh token is invalid, expired or revoked');
  }
  return outcome.result;
}
