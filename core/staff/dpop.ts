/**
 * Proof of possession at staff sign-in (issue 17 item 3: one rule for customers, agents and
 * staff): a `DPoP` proof sent with a sign-in binds the session and its tokens to that key
 * (`cnf.jkt`; the edge then asks for a proof on every request and refresh needs the same key);
 * a tenant with `require_dpop` refuses a sign-in without one.
 */
import type { RequestContext } from '../http/route.ts';
import { dpopBinding, requireProof, type DpopDeps } from '../http/dpop.ts';
import { tenantSettings } from '../identity/settings.ts';

export async function staffSignInBinding(deps: DpopDeps, ctx: RequestContext<unknown, unknown, unknown>, tenantId: string): Promise<{ jkt: string } | undefined> {
  const settings = await tenantSettings(deps.db, tenantId);
  const pop = await dpopBinding(deps, ctx, { requireNonce: settings?.requireDpopNonce ?? false });
  if (settings?.requireDpop) return requireProof(pop, deps);
  return pop;
}
