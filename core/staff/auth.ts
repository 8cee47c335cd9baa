/**
 * The staff member behind `Authorization: Bearer <staff access token>` (core/staff/tokens.ts):
 * signature under the tenant's keys, audience "staff", type at+jwt, expiry, a live session of
 * that member, and the member still active (a deprovisioned person's token stops working at
 * once, issue 14 item 1). Routes acting for the signed-in person (passkeys, sessions, sign-out,
 * step-up) check it here themselves: the edge passes them as public until it verifies staff
 * tokens too. Refusals carry the codes of the one verifier's table (shared/access-token.ts).
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { requireLiveSession, verifiedToken } from '../http/access-token.ts';
import { refuseUnboundToken, requireTokenProof } from '../http/dpop.ts';
import type { RequestContext } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { requireActiveTenant, requireAllowedAddress, staffTenantRules } from './tenant-rules.ts';
import { staffUserById, type StaffUser } from './store.ts';

export interface StaffCaller {
  tenantId: string;
  user: StaffUser;
  sessionId: string;
  aal: 1 | 2;
  amr: string[];
  jti: string;
  orig?: string;
  cnf?: Record<string, unknown>;
}

type Ctx = Pick<RequestContext<unknown, unknown, unknown>, 'headers' | 'path' | 'identity' | 'method'>;

export async function authenticateStaff(
  deps: { keys: KeyStore; db: Queryable; now: () => number },
  ctx: Ctx,
): Promise<StaffCaller> {
  const { keys, db: q } = deps;
  const { token, claims: raw } = await verifiedToken(keys, ctx, 'staff', deps.now());
  await requireLiveSession(q, 'staff', raw, deps.now());
  const user = await staffUserById(q, raw.tid, raw.sub);
  // The edge's answer for a member who is gone (edge/auth/staff.ts): the session is over.
  if (!user || user.deletedAt || !user.active)
    throw new AppError('session_revoked', 'the staff member is not active');
  // Issue 17 item 3: a token bound by a DPoP refresh is no bearer token here either.
  const cnf = raw.cnf as Record<string, unknown> | undefined;
  const jkt = cnf?.jkt;
  const rules = await staffTenantRules(q, raw.tid);
  if (jkt !== undefined) await requireTokenProof(deps, ctx, token, typeof jkt === 'string' ? jkt : '');
  else if (rules.requireDpop) throw refuseUnboundToken(deps);
  requireAllowedAddress(rules, ctx.identity.clientIp);
  requireActiveTenant(rules, ctx.path);
  return {
    tenantId: raw.tid,
    user,
    sessionId: raw.sid,
    aal: raw.aal >= 2 ? 2 : 1,
    amr: raw.amr,
    jti: raw.jti,
    ...(raw.orig ? { orig: raw.orig } : {}),
    ...(cnf && typeof cnf === 'object' ? { cnf } : {}),
  };
}
