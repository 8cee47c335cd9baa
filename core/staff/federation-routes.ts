/**
 * Staff sign-in routes (SPEC 4.4): `POST /auth/login` with `method: "federation"` starts an
 * OpenID Connect sign-in at the tenant's provider; the provider sends the browser back to
 * `GET /auth/callback`, which answers with the staff tokens (./federation.ts). Passkey sign-in
 * (issue 14 part 2) adds its own methods to the same login route.
 */
import { Type, type Static } from '@sinclair/typebox';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { TenantId } from '../identity/schemas.ts';
import { beginFederation, completeFederation, type FederationDeps } from './federation.ts';
import { StaffTokenPair } from './refresh.ts';
import type { LoginMethod } from './login-route.ts';
import { declared } from '../http/declared.ts';

const tags = ['staff-auth'];
const Param = Type.String({ maxLength: 2048 });

const FederationBegin = Type.Object(
  { tenantId: TenantId, method: Type.Literal('federation') },
  { additionalProperties: false },
);

/** `POST /auth/login` with `method: "federation"`: the provider authorization URL (PKCE, state, nonce). */
export function federationLoginMethod(deps: FederationDeps): LoginMethod {
  return {
    method: 'federation',
    bodies: [FederationBegin],
    replies: [Type.Object({ authorizationUrl: Type.String(), expiresIn: Type.Integer() })],
    handle: async (ctx, body) => ({
      status: 200,
      body: await beginFederation(deps, ctx, (body as Static<typeof FederationBegin>).tenantId),
    }),
  };
}

export function federationRoutes(deps: FederationDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('GET', '/auth/callback'),
      operationId: 'staffFederationCallback',
      tags,
      summary:
        "The provider's redirect back: verifies state, code (PKCE) and ID token; answers with staff tokens",
      query: Type.Object(
        {
          state: Type.Optional(Param),
          code: Type.Optional(Param),
          iss: Type.Optional(Param),
          session_state: Type.Optional(Param),
          error: Type.Optional(Param),
          error_description: Type.Optional(Param),
        },
        { additionalProperties: false },
      ),
      responses: { 200: { description: 'Staff tokens', schema: StaffTokenPair } },
      handler: async (ctx) => {
        const query = Object.fromEntries(
          Object.entries(ctx.query).filter((e): e is [string, string] => typeof e[1] === 'string'),
        );
        return {
          status: 200,
          body: await completeFederation(deps, ctx, query),
          headers: { 'cache-control': 'no-store' },
        };
      },
    }),
  ];
}
