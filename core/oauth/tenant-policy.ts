/**
 * What a tenant's security settings (SPEC 2.10) say about its OAuth clients (issue 17):
 * `oauth_client_secrets_forbidden` (no client_secret_basic/post, neither registered nor used),
 * `mtls_trusted_cas` (PEM certificates of the CAs whose client certificates `tls_client_auth`
 * accepts: Envoy only proves the client holds the certificate's key, the tenant says whom it
 * trusts) and `require_dpop_nonce` (server nonces in DPoP proofs, RFC 9449 §8).
 */
import { X509Certificate } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable } from '../../shared/db/pool.ts';

const Security = Type.Object({
  oauth_client_secrets_forbidden: Type.Optional(Type.Boolean()),
  mtls_trusted_cas: Type.Optional(Type.Array(Type.String({ maxLength: 16384 }), { maxItems: 20 })),
  require_dpop_nonce: Type.Optional(Type.Boolean()),
});
const checkSecurity = TypeCompiler.Compile(Security);

export interface OAuthTenantPolicy {
  secretsForbidden: boolean;
  trustedCas: X509Certificate[];
  requireDpopNonce: boolean;
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

/** Malformed settings fail closed: secrets forbidden, no CA trusted, nonces required. */
export async function oauthTenantPolicy(q: Queryable, tenantId: string): Promise<OAuthTenantPolicy> {
  const { rows } = await q.query<{ security: unknown }>('SELECT security FROM tenants WHERE id = $1', [
    tenantId,
  ]);
  const sec = rows[0]?.security;
  if (!checkSecurity.Check(sec)) return { secretsForbidden: true, trustedCas: [], requireDpopNonce: true };
  return {
    secretsForbidden: sec.oauth_client_secrets_forbidden === true,
    trustedCas: certificates(sec.mtls_trusted_cas ?? []),
    requireDpopNonce: sec.require_dpop_nonce === true,
  };
}
