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
import { X509Certificate } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable } from '../../shared/db/pool.ts';
import { addressAllowed } from '../../shared/ip-ranges.ts';
import { rangesOf } from '../staff/tenant-rules.ts';

const Security = Type.Object({
  oauth_client_secrets_forbidden: Type.Optional(Type.Boolean()),
  mtls_trusted_cas: Type.Optional(Type.Array(Type.String({ maxLength: 16384 }), { maxItems: 20 })),
  require_dpop_nonce: Type.Optional(Type.Boolean()),
  require_mtls_for_m2m: Type.Optional(Type.Boolean()),
});
const checkSecurity = TypeCompiler.Compile(Security);

export interface OAuthTenantPolicy {
  secretsForbidden: boolean;
  trustedCas: X509Certificate[];
  requireDpopNonce: boolean;
  /** SPEC 2.10 require_mtls_for_m2m: no token without a client certificate on the connection. */
  requireMtls: boolean;
  /** The platform suspended the tenant (tenants.status): its clients get no new token. */
  suspended: boolean;
  /** SPEC 2.10 allowed_ip_ranges: when the tenant sets any, only a source inside one (the edge's x-client-ip). */
  sourceAllowed: (ip: string | undefined) => boolean;
}

/** Whether `c` is within its validity period at `nowMs`. */
export function validAt(c: X509Certificate, nowMs: number): boolean {
  return Date.parse(c.validFrom) <= nowMs && nowMs <= Date.parse(c.validTo);
}

/**
 * Whether one of the tenant's `mtls_trusted_cas` (valid now) issued `cert`. The front door
 * verifies a certificate against every CA some tenant trusts (deploy/envoy/envoy.yaml
 * `machine_mtls`), so only this says the certificate is one this tenant trusts.
 */
export function issuedByTrustedCa(policy: OAuthTenantPolicy, cert: X509Certificate, nowMs: number): boolean {
  return policy.trustedCas.some(
    (ca) => validAt(ca, nowMs) && cert.checkIssued(ca) && cert.verify(ca.publicKey),
  );
}

function certificates(pems: string[]): X509Certificate[] {
  const out: X509Certificate[] = [];
  for (const pem of pems) {
    try {
      out.push(new X509Certificate(pem));
    } catch {
      // an unreadable entry trusts nothing
    }
  }
  return out;
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
    return { secretsForbidden: true, trustedCas: [], requireDpopNonce: true, requireMtls: true, ...tenant };
  return {
    secretsForbidden: sec.oauth_client_secrets_forbidden === true,
    trustedCas: certificates(sec.mtls_trusted_cas ?? []),
    requireDpopNonce: sec.require_dpop_nonce === true,
    requireMtls: sec.require_mtls_for_m2m === true,
    ...tenant,
  };
}
