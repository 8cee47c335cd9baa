/**
 * SPEC 2.10 `require_mtls_for_m2m` at the edge for every machine credential (DESIGN "People and
 * machines": OAuth clients, API keys, service tokens, SCIM credentials): the one rule of
 * shared/mtls.ts on the certificate Envoy verified (`view.peerCertificate`), read from the cached
 * tenant (dropped on `tenants_changed`, so a change applies from the next request). Applied only
 * once the credential itself verified, so a caller who cannot present it learns nothing of the
 * tenant's settings; the refusal is then audited in the credential's tenant naming it.
 */
import { machineMtlsRule, tenantMtlsRefusal, type MachineMtlsRule } from '../../shared/mtls.ts';
import type { RequestView } from '../check.ts';
import type { TenantState } from '../state/store.ts';
import { CredentialError } from './bearer.ts';

/** The tenant's rule; a tenant the edge cannot find requires nothing here (the policy refuses it). */
export async function tenantMtlsRule(
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  tenantId: string,
): Promise<MachineMtlsRule> {
  return machineMtlsRule((await tenantOf(tenantId))?.security);
}

/** 403 `mtls_required` (the API-key path's code and body) unless the call meets the tenant's rule. */
export async function requireMachineMtls(
  view: RequestView,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  tenantId: string,
  nowMs: number,
): Promise<void> {
  const refused = tenantMtlsRefusal(await tenantMtlsRule(tenantOf, tenantId), view.peerCertificate, nowMs);
  if (refused !== undefined) throw new CredentialError(403, 'mtls_required', refused);
}

/**
 * Run the checks that follow a credential's verification: a refusal among them names who the
 * credential verifiably is (`CredentialError.verifiedAs`), so edge/authz.ts admit audits it in that
 * tenant's chain under that machine, not as an anonymous caller under `_platform`.
 */
export async function asVerified<T>(tenantId: string, actorId: string, checks: () => Promise<T>): Promise<T> {
  try {
    return await checks();
  } catch (err) {
    if (err instanceof CredentialError)
      err.verifiedAs = { tenantId, actor: { type: 'service', id: actorId } };
    throw err;
  }
}
