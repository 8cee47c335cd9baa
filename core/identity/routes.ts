/**
 * Customer identity routes (SPEC 4.2 without the /v1 prefix, plus what issue 3 adds: token
 * refresh, logout, sessions, devices, step-up OTP and the per-tenant JWKS).
 */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import type { TxClient } from '../../shared/db/pool.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { withBoundStepUp } from './bound.ts';
import type { IdentityDeps } from './context.ts';
import { deviceRoutes } from './device-routes.ts';
import { DeviceAssertion } from './devices.ts';
import { login } from './login.ts';
import { phoneRoutes } from './routes-phone.ts';
import { refresh } from './refresh.ts';
import { OpaqueToken, Otp, Phone, TenantId } from './schemas.ts';
import { listSessions, revokeSession } from './sessions.ts';
import { completeStepUp, sendStepUpOtp } from './stepup.ts';
import { authenticate } from './tokens.ts';
import { Uuid } from '../ledger/schemas.ts';
import { declared } from '../http/declared.ts';

const tags = ['customer-auth'];
const bearerHeader = [{ name: 'Authorization', required: true, description: 'Bearer <access token>' }];
const Jwt = Type.String({
  minLength: 16,
  maxLength: 4096,
  pattern: '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$',
});

const LoginBody = Type.Object(
  { tenantId: TenantId, phone: Phone, pin: Type.String({ pattern: '^[0-9]{4,6}$' }) },
  { additionalProperties: false },
);
const TokenPair = Type.Object({
  accessToken: Type.String(),
  refreshToken: Type.String(),
  expiresIn: Type.Integer(),
  tokenType: Type.Optional(Type.Union([Type.Literal('Bearer'), Type.Literal('DPoP')])),
  sessionId: Type.String(),
  aal: Type.Integer(),
  mfaRequired: Type.Optional(Type.Boolean()),
  challenge: Type.Optional(Type.String()),
  methods: Type.Optional(Type.Array(Type.String())),
});
const RefreshBody = Type.Object(
  { tenantId: TenantId, refreshToken: OpaqueToken },
  { additionalProperties: false },
);
const StepUpBody = Type.Object(
  {
    challengeToken: Jwt,
    otp: Type.Optional(Type.Union([Otp, Type.Null()])),
    deviceAssertion: Type.Optional(Type.Union([DeviceAssertion, Type.Null()])),
  },
  { additionalProperties: false },
);
const StepUpReply = Type.Object({
  accessToken: Type.String(),
  expiresIn: Type.Integer(),
  aal: Type.Literal(2),
  tokenType: Type.Optional(Type.Union([Type.Literal('Bearer'), Type.Literal('DPoP')])),
});
const SessionView = Type.Object({
  id: Type.String(),
  createdAt: Type.String(),
  lastSeen: Type.String(),
  aal: Type.Integer(),
  device: Type.Union([Type.String(), Type.Null()]),
  ip: Type.Union([Type.String(), Type.Null()]),
  current: Type.Boolean(),
});
const Jwks = Type.Object({ keys: Type.Array(Type.Record(Type.String(), Type.Unknown())) });

/** Login, refresh and logout. */
const signInRoutes = (deps: IdentityDeps) => {
  const { db, keys, now } = deps;
  return [
    defineRoute({
      ...declared('POST', '/customers/auth/login'),
      operationId: 'customerLogin',
      tags,
      body: LoginBody,
      summary: 'Log in with phone and PIN (AAL 1); uniform 401 for every credential failure',
      responses: { 200: { description: 'Session created', schema: TokenPair } },
      handler: async (ctx) => ({ status: 200, body: await login(deps, ctx, ctx.body) }),
    }),
    defineRoute({
      ...declared('POST', '/customers/auth/token/refresh'),
      operationId: 'customerTokenRefresh',
      tags,
      body: RefreshBody,
      summary: 'Rotate the refresh token; reuse of a rotated token revokes the session',
      responses: { 200: { description: 'New token pair', schema: TokenPair } },
      handler: async (ctx) => ({
        status: 200,
        body: await refresh(deps, ctx, ctx.body.tenantId, ctx.body.refreshToken),
      }),
    }),
    defineRoute({
      ...declared('POST', '/customers/auth/logout'),
      operationId: 'customerLogout',
      tags,
      headers: bearerHeader,
      bodyKind: 'json',
      summary: 'Revoke the current session',
      responses: { 204: { description: 'Logged out' } },
      handler: async (ctx) => {
        const c = await authenticate({ keys, db, now }, ctx);
        await db.tx((q) =>
          revokeSession(q, c.tenantId, c.sessionId, 'logout', { type: 'customer', id: c.customerId }, now()),
        );
        return { status: 204 };
      },
    }),
  ];
};

/** The caller's sessions: list, revoke one. */
const sessionRoutes = (deps: IdentityDeps) => {
  const { db, keys, now } = deps;
  return [
    defineRoute({
      ...declared('GET', '/customers/sessions'),
      operationId: 'customerSessions',
      tags,
      headers: bearerHeader,
      summary: "The caller's live sessions",
      responses: {
        200: { description: 'Sessions', schema: Type.Object({ sessions: Type.Array(SessionView) }) },
      },
      handler: async (ctx) => {
        const c = await authenticate({ keys, db, now }, ctx);
        const sessions = (await listSessions(db, c.tenantId, c.customerId)).map((s) => ({
          ...s,
          current: s.id === c.sessionId,
        }));
        return { status: 200, body: { sessions } };
      },
    }),
    defineRoute({
      ...declared('DELETE', '/customers/sessions/{id}'),
      operationId: 'customerSessionRevoke',
      tags,
      headers: bearerHeader,
      params: Type.Object({ id: Uuid }),
      summary:
        "Revoke one of the caller's sessions: the current one is a logout; another needs a step-up bound to this request",
      responses: { 204: { description: 'Revoked' } },
      handler: async (ctx) => {
        const c = await authenticate({ keys, db, now }, ctx);
        const revoke = async (q: TxClient) => {
          const own = await q.query(
            `SELECT 1 FROM sessions WHERE tenant_id = $1 AND id = $2 AND subject_type = 'customer' AND subject_id = $3 AND revoked_at IS NULL FOR UPDATE`,
            [c.tenantId, ctx.params.id, c.customerId],
          );
          const done =
            own.rows.length > 0 &&
            (await revokeSession(
              q,
              c.tenantId,
              ctx.params.id,
              'revoked_by_customer',
              { type: 'customer', id: c.customerId },
              now(),
            ));
          if (!done) throw new AppError('NOT_FOUND', 'no such live session');
        };
        // Issue 13 item 1: ending the caller's own session is a logout; ending another one (a
        // lost phone, or the customer's real phone in an attacker's hands) changes who holds the
        // account, so it needs its own bound step-up.
        if (ctx.params.id === c.sessionId) await db.tx(revoke);
        else await withBoundStepUp(deps, c, ctx, 'session.revoke', now(), revoke);
        return { status: 204 };
      },
    }),
  ];
};

/** Step-up: the OTP, then completion (under both paths). */
const stepUpRoutes = (deps: IdentityDeps) => {
  return [
    defineRoute({
      ...declared('POST', '/customers/auth/stepup/otp'),
      operationId: 'customerStepUpOtp',
      tags,
      headers: bearerHeader,
      body: Type.Object({ challengeToken: Jwt }, { additionalProperties: false }),
      summary: 'Send an OTP bound to a step-up challenge',
      responses: {
        202: {
          description: 'Code sent',
          schema: Type.Object({
            expiresIn: Type.Integer({ minimum: 1, description: 'seconds the code stays valid' }),
          }),
        },
      },
      handler: async (ctx) => {
        await sendStepUpOtp(deps, ctx, ctx.body.challengeToken);
        return { status: 202, body: { expiresIn: 300 } };
      },
    }),
    ...['/customers/auth/stepup/complete', '/auth/stepup/complete'].map((path) =>
      defineRoute({
        ...declared('POST', path),
        operationId: path.startsWith('/customers') ? 'customerStepUpComplete' : 'stepUpCompleteAlias',
        tags,
        headers: bearerHeader,
        body: StepUpBody,
        summary:
          'Complete a step-up with an OTP or a device assertion; returns an AAL 2 token (~10 min)' +
          (path.startsWith('/customers')
            ? ''
            : ' (SPEC 4.2 names this path in the request flow; same operation)'),
        responses: { 200: { description: 'AAL 2 token', schema: StepUpReply } },
        handler: async (ctx) => ({ status: 200, body: await completeStepUp(deps, ctx, ctx.body) }),
      }),
    ),
  ];
};

/** A tenant's public keys. */
const jwksRoute = (deps: IdentityDeps) => {
  const { db, keys } = deps;
  return defineRoute({
    ...declared('GET', '/.well-known/jwks.json'),
    operationId: 'tenantJwks',
    tags,
    query: Type.Object({ tenant: TenantId }),
    summary: "A tenant's token verification keys (active and grace)",
    responses: { 200: { description: 'JWKS', schema: Jwks } },
    handler: async (ctx) => {
      const exists = await db.query('SELECT 1 FROM tenants WHERE id = $1', [ctx.query.tenant]);
      if (exists.rows.length === 0) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
      await keys.ensureActive(ctx.query.tenant);
      return {
        status: 200,
        headers: { 'cache-control': 'public, max-age=300' },
        body: await keys.jwks(ctx.query.tenant),
      };
    },
  });
};

export function identityRoutes(deps: IdentityDeps): RouteSpec[] {
  return [
    ...phoneRoutes(deps),
    ...deviceRoutes(deps),
    ...signInRoutes(deps),
    ...sessionRoutes(deps),
    ...stepUpRoutes(deps),
    jwksRoute(deps),
  ];
}
