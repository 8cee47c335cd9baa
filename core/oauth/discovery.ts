/**
 * Authorization server metadata (RFC 8414; issue 17 item 5) at
 * `/.well-known/oauth-authorization-server`, so machine clients configure themselves the way
 * standard libraries do. The issuer is ISSUER_URL when the deployment configures it (and then
 * client-credentials tokens carry it as `iss`); otherwise the URL the document was asked on.
 * Customer, agent and staff tokens keep their tenant-scoped issuer (README).
 */
import { Type } from '@sinclair/typebox';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { requestUrlOf } from '../http/dpop.ts';
import { dpopAlgorithms } from '../../shared/dpop.ts';
import { assertionAlgorithms } from './client-auth.ts';
import { authMethods, coreScopes } from './clients.ts';
import { declared } from '../http/declared.ts';

type Ctx = Pick<RequestContext<unknown, unknown, unknown>, 'headers' | 'path' | 'identity' | 'method'>;

/** The issuer: ISSUER_URL, else the origin the client addressed. */
export function issuerOf(keys: KeyStore, ctx: Ctx): string {
  return keys.issuerUrl ?? new URL(requestUrlOf(ctx)).origin;
}

export function tokenEndpointOf(keys: KeyStore, ctx: Ctx): string {
  return `${issuerOf(keys, ctx)}/oauth2/token`;
}

export function discoveryRoutes(deps: { keys: KeyStore }): RouteSpec[] {
  return [
    defineRoute({
      ...declared('GET', '/.well-known/oauth-authorization-server'),
      operationId: 'oauthMetadata',
      tags: ['oauth'],
      summary: 'OAuth 2.0 authorization server metadata (RFC 8414)',
      responses: { 200: { description: 'Metadata', schema: Type.Record(Type.String(), Type.Unknown()) } },
      handler: async (ctx) => {
        const issuer = issuerOf(deps.keys, ctx);
        const tokenEndpoint = `${issuer}/oauth2/token`;
        return {
          status: 200,
          headers: { 'cache-control': 'public, max-age=300' },
          body: {
            issuer,
            token_endpoint: tokenEndpoint,
            // Keys are per tenant: a verifier names the tenant (`?tenant=`), as `tid` in every token does.
            jwks_uri: `${issuer}/.well-known/jwks.json`,
            grant_types_supported: ['client_credentials'],
            response_types_supported: [],
            scopes_supported: [...coreScopes],
            token_endpoint_auth_methods_supported: [...authMethods],
            token_endpoint_auth_signing_alg_values_supported: [...assertionAlgorithms],
            dpop_signing_alg_values_supported: [...dpopAlgorithms],
            tls_client_certificate_bound_access_tokens: true,
            // The mTLS listener (deploy/envoy/envoy.yaml `machine_mtls`) serves the same paths.
            mtls_endpoint_aliases: { token_endpoint: tokenEndpoint },
          },
        };
      },
    }),
  ];
}
