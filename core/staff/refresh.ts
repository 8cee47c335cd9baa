/**
 * POST /auth/token (SPEC 4.4; issue 14 item 3): a staff member's refresh, the same rotation as
 * customers' (core/identity/refresh.ts: single use, a reused token revokes its family and
 * session, idle timeout, wrong tokens counted against the source address), on sessions of
 * subject_type 'user' only. The next access token keeps the sign-in's AAL and amr (recorded on
 * the session, migration 0820) and carries the roles the member holds now; a member deprovisioned
 * since sign-in is refused and the session revoked. Proof of possession (DPoP) is wip/pop's.
 */
import { Type } from '@sinclair/typebox';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import type { IdentityDeps } from '../identity/context.ts';
import { rotateRefreshToken, type RefreshKind } from '../identity/refresh.ts';
import { OpaqueToken, TenantId } from '../identity/schemas.ts';
import { staffAccessTtlS, staffAccessToken } from './tokens.ts';
import { declared } from '../http/declared.ts';

export const StaffTokenPair = Type.Object({
  accessToken: Type.String(),
  refreshToken: Type.String(),
  tokenType: Type.String(),
  expiresIn: Type.Integer(),
  sessionId: Type.String(),
  aal: Type.Integer(),
});

function staffKind(deps: IdentityDeps): RefreshKind {
  return {
    subjectType: 'user',
    actorType: 'staff',
    issue: async (q, s, t) => {
      const aal = s.aal >= 2 ? 2 : 1;
      const a = await staffAccessToken(
        q,
        deps.keys,
        {
          tenantId: s.tenantId,
          userId: s.subjectId,
          sessionId: s.sessionId,
          aal,
          amr: s.amr ?? [],
          ...(s.cnf ? { cnf: s.cnf } : {}),
        },
        t,
      );
      return a && { ...a, aal, expiresIn: staffAccessTtlS };
    },
  };
}

export function staffTokenRoutes(deps: IdentityDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/auth/token'),
      operationId: 'staffTokenRefresh',
      tags: ['staff-auth'],
      summary: 'Rotate a staff refresh token; a reused token revokes its family and session',
      body: Type.Object(
        {
          tenantId: TenantId,
          refreshToken: OpaqueToken,
          grantType: Type.Optional(Type.Literal('refresh_token')),
        },
        { additionalProperties: false },
      ),
      responses: { 200: { description: 'New token pair', schema: StaffTokenPair } },
      handler: async (ctx) => {
        const r = await rotateRefreshToken(
          deps,
          ctx,
          ctx.body.tenantId,
          ctx.body.refreshToken,
          staffKind(deps),
        );
        return { status: 200, body: r };
      },
    }),
  ];
}
