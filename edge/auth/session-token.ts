/**
 * Access tokens at the edge through the one verifier (shared/access-token.ts; its table of
 * refusal codes, the same at core): the token's checks, then the session rule on the edge's
 * cached session with the tenant's idle timeout, and the token's proof of possession. One path
 * for customer, agent and staff tokens (edge/auth/principal.ts, edge/auth/staff.ts).
 */
import {
  checkSession,
  defaultSessionTimeoutMin,
  TokenRefusal,
  verifyAccessToken,
  type TokenKind,
} from '../../shared/access-token.ts';
import type { RequestView } from '../check.ts';
import type { EdgeState, SessionState, TenantState } from '../state/store.ts';
import { CredentialError } from './bearer.ts';
import { checkBinding } from './dpop.ts';

/** SPEC 2.10 session_timeout_minutes, or the default when the tenant sets none. */
const sessionTimeoutOf = (t: TenantState | undefined): number =>
  Number(t?.security.session_timeout_minutes ?? defaultSessionTimeoutMin);

/** A refusal of the one verifier (shared/access-token.ts) as the edge answers it: same code. */
export function refused(err: unknown): unknown {
  return err instanceof TokenRefusal ? new CredentialError(401, err.code, err.message) : err;
}

/** The one verifier's checks of a token (its table of codes), refusals as CredentialErrors. */
export async function verified<K extends TokenKind>(
  view: RequestView,
  state: EdgeState,
  kind: K,
  nowMs: number,
) {
  try {
    return await verifyAccessToken(state.keys, view.headers.authorization, kind, nowMs);
  } catch (err) {
    throw refused(err);
  }
}

/**
 * The session rule (shared/access-token.ts checkSession) on the edge's cached session, with the
 * tenant's idle timeout, and the token's proof of possession (issue 17 item 3: a bound token
 * needs its proof; require_dpop refuses unbound ones): one rule for customers, agents and staff.
 */
export async function liveSession(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
  kind: 'customer' | 'agent' | 'staff',
  token: string,
  claims: { tid: string; sid: string; sub: string; cnf?: unknown },
): Promise<SessionState> {
  const session = await state.session(claims.tid, claims.sid);
  const tenant = await tenantOf(claims.tid);
  try {
    checkSession(session, kind, claims.sub, { nowMs, timeoutMin: sessionTimeoutOf(tenant) });
  } catch (err) {
    throw refused(err);
  }
  if (kind === 'staff' && !(await state.staffMember(claims.tid, claims.sub))?.active)
    throw new CredentialError(401, 'session_revoked', 'the staff member is not active');
  await checkBinding(view, state, token, claims.cnf, nowMs, tenant?.security.require_dpop === true);
  return session;
}
