/**
 * What a tenant's security settings (SPEC 2.10) say about its OAuth clients (issue 17):
 * `oauth_client_secrets_forbidden` (no client_secret_basic/post, neither registered nor used),
 * `mtls_trusted_cas` (PEM certificates of the CAs whose client certificates `tls_client_auth`
 * accepts: Envoy only proves the client holds the certificate's key, the tenant says whom it
 * trusts), `require_dpop_nonce` (server nonces in DPoP proofs, RFC 9449 §8) and SPEC 2.10
 * `require_mtls_for_m2m` (every machine call over mutual TLS: a token only to a client that
 * connected with a certificate, and bound to it). Beside them, what
 * the edge applies to every route naming the tenant but cannot apply to `/oauth2/token` (a public
 * route that need not name one): the tenant's status and its `allowed_ip_ranges`.
 */
import type { X509Certificate } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable } from '../../shared/db/pool.ts';
import { addressAllowed } from '../../shared/ip-ranges.ts';
import { rangesOf } from '../staff/tenant-rules.ts';
import { machineMtlsRule, type MachineMtlsRule } from '../../shared/mtls.ts';

const Security = Type.Object({
  oauth_client_secrets_forbidden: Type.Optional(Type.Boolean()),
  mtls_trusted_cas: Type.Optional(Type.Array(Type.String({ maxLength: 16384 }), { maxItems: 20 })),
  require_dpop_nonce: Type.Optional(Type.Boolean()),
  require_mtls_for_m2m: Type.Optional(Type.Boolean()),
});
const checkSecurity = TypeCompiler.Compile(Security);

export interface OAuthTenantPolicy {
  secretsForbidden: boolean;
  /** `mtls_trusted_cas`: whom `tls_client_auth` accepts (readable entries only). */
  trustedCas: readonly X509Certificate[];
  requireDpopNonce: boolean;
  /**
   * SPEC 2.10 require_mtls_for_m2m with mtls_trusted_cas: no token without a client certificate
   * on the connection, from a CA the tenant lists when it lists any (shared/mtls.ts, the rule the
   * edge applies to every machine call).
   */
  mtls: MachineMtlsRule;
  /** The platform suspended the tenant (tenants.status): its clients get no new token. */
  suspended: boolean;
  /** SPEC 2.10 allowed_ip_ranges: when the tenant sets any, only a source inside one (the edge's x-client-ip). */
  sourceAllowed: (ip: string | undefined) => boolean;
}

/**
 * Malformed settings fail closed: secrets forbidden, no CA trusted, nonces and mTLS required. The ranges
 * are read as the edge's policy reads them (shared/ip-ranges.ts). A tenant that is not
 * ACTIVE (or gone) counts as suspended.
 */
export async function oauthTenantPolicy(q: Queryable, tenantId: string): Promise<OAuthTenantPolicy> {
  const { rows } = await q.query<{ security: unknown; status: string; ranges: unknown }>(
    `SELECT security, status, security -> 'allowed_ip_ranges' AS ranges FROM tenants WHERE id = $1`,
    [tenantId],
  );
  const sec = rows[0]?.security;
  const ranges = rangesOf(rows[0]?.ranges);
  const tenant = {
    suspended: rows[0]?.status !== 'ACTIVE',
    sourceAllowed: (ip: string | undefined) => addressAllowed(ranges, ip),
  };
  if (!checkSecurity.Check(sec))
    return {
      secretsForbidden: true,
      trustedCas: [],
      requireDpopNonce: true,
      mtls: { required: true, trustedCas: [] },
      ...tenant,
    };
  const mtls = machineMtlsRule(sec);
  return {
    secretsForbidden: sec.oauth_client_secrets_forbidden === true,
    trustedCas: [...(mtls.trustedCas ?? [])],
    requireDpopNonce: sec.require_dpop_nonce === true,
    mtls,
    ...tenant,
  };
}
