/**
 * Staff authentication routes (SPEC 4.4; issue 16): `/auth/login` (a dispatcher on `method`:
 * passkeys here, federation beside it), passkey enrolment from a one-time link, the signed-in
 * person's passkeys and sessions, sign-out, and the step-up endpoints.
 */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { TenantId } from '../../shared/tenant-id.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import { clientIpOf } from '../identity/context.ts';
import { listSessions, revokeSession } from '../identity/sessions.ts';
import { Uuid } from '../ledger/schemas.ts';
import { authenticateStaff } from './auth.ts';
import { staffLoginRoute, type LoginMethod } from './login-route.ts';
import {
  enrolmentBegin,
  enrolmentFinish,
  staffStepUpChallenge,
  staffStepUpComplete,
  type Origin,
  type StaffDeps,
} from './passkey-auth.ts';
import { passkeysOf, removePasskey, renamePasskey } from './passkeys.ts';
import { staffSubject } from './store.ts';
import { requireActiveTenant, requireAllowedAddress, staffTenantRules } from './tenant-rules.ts';
import { AuthenticationResponse, RegistrationResponse } from './webauthn.ts';
import { declared } from '../http/declared.ts';

const tags = ['staff-auth'];
const bearerHeader = [{ name: 'Authorization', required: true, description: 'Bearer <staff access token>' }];
/** Core verifies the staff access token on these routes itself (the edge passes them as public): the document's security. */
const staffPerson = 'staff-person' as const;
const EnrolmentToken = Type.String({ minLength: 20, maxLength: 128, pattern: '^enr_[A-Za-z0-9_-]+$' });
const Jwt = Type.String({
  minLength: 16,
  maxLength: 4096,
  pattern: '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$',
});
const PasskeyName = Type.String({ minLength: 1, maxLength: 64, pattern: '^[^\\u0000-\\u001f\\u007f]+$' });
const PasskeyView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  createdAt: Type.String(),
  lastUsedAt: Type.Union([Type.String(), Type.Null()]),
  backedUp: Type.Boolean(),
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
const Options = Type.Record(Type.String(), Type.Unknown());
const NamedRequest = Type.Object(
  {
    method: Type.Union(['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].map((m) => Type.Literal(m))),
    path: Type.String({ minLength: 1, maxLength: 2048, pattern: '^/[\\x21-\\x7e]*$' }),
    body: Type.Optional(Type.String({ maxLength: 8192 })),
  },
  { additionalProperties: false },
);

const originOf = (ctx: RequestContext<unknown, unknown, unknown>): Origin => ({
  ip: clientIpOf(ctx),
  requestId: ctx.requestId,
});

/** The signed-in staff member of a request (core verifies the staff token on these routes itself). */
const caller = (deps: StaffDeps, ctx: RequestContext<unknown, unknown, unknown>) =>
  authenticateStaff({ keys: deps.keys, db: deps.db, now: deps.now }, ctx);

/**
 * A link's tenant must be one whose staff may still act (core/staff/tenant-rules.ts): the edge
 * refuses a suspended or address-restricted tenant named in the body, core does when reached
 * without it, so a suspended tenant gains no passkey (enrolment is not step-up or sign-out).
 */
async function requireEnrolmentAllowed(
  deps: StaffDeps,
  ctx: RequestContext<unknown, unknown, { tenantId: string }>,
): Promise<void> {
  const rules = await staffTenantRules(deps.db, ctx.body.tenantId);
  requireAllowedAddress(rules, ctx.identity.clientIp);
  requireActiveTenant(rules, ctx.path);
}

const staffEnrolmentBeginRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('POST', '/auth/enrolment/begin'),
    operationId: 'staffEnrolmentBegin',
    tags,
    body: Type.Object({ tenantId: TenantId, token: EnrolmentToken }, { additionalProperties: false }),
    summary: 'Registration options for a passkey, from a one-time enrolment link',
    responses: {
      200: {
        description: 'PublicKeyCredentialCreationOptions (JSON)',
        schema: Type.Object({ options: Options, userName: Type.String() }),
      },
    },
    handler: async (ctx) => {
      await requireEnrolmentAllowed(deps, ctx);
      return { status: 200, body: await enrolmentBegin(deps, ctx.body.tenantId, ctx.body.token) };
    },
  });

const staffEnrolmentFinishRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('POST', '/auth/enrolment/finish'),
    operationId: 'staffEnrolmentFinish',
    tags,
    body: Type.Object(
      {
        tenantId: TenantId,
        token: EnrolmentToken,
        response: RegistrationResponse,
        name: Type.Optional(PasskeyName),
      },
      { additionalProperties: false },
    ),
    summary: 'Store the new passkey; the enrolment link is used up',
    responses: {
      201: {
        description: 'Passkey registered',
        schema: Type.Object({ id: Type.String(), userName: Type.String() }),
      },
    },
    handler: async (ctx) => {
      await requireEnrolmentAllowed(deps, ctx);
      return {
        status: 201,
        body: await enrolmentFinish(
          deps,
          ctx.body.tenantId,
          ctx.body.token,
          ctx.body.response,
          ctx.body.name,
          originOf(ctx),
        ),
      };
    },
  });

const staffPasskeysRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/auth/passkeys'),
    operationId: 'staffPasskeys',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    summary: "The signed-in person's passkeys",
    responses: {
      200: {
        description: 'Passkeys',
        schema: Type.Object({ userName: Type.String(), passkeys: Type.Array(PasskeyView) }),
      },
    },
    handler: async (ctx) => {
      const c = await caller(deps, ctx);
      return {
        status: 200,
        body: {
          userName: c.user.userName,
          passkeys: (await passkeysOf(deps.db, c.tenantId, c.user.id)).map((p) => p.view),
        },
      };
    },
  });

const staffPasskeyRenameRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('PATCH', '/auth/passkeys/{id}'),
    operationId: 'staffPasskeyRename',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    params: Type.Object({ id: Uuid }),
    body: Type.Object({ name: PasskeyName }, { additionalProperties: false }),
    summary: 'Rename one of your passkeys',
    responses: { 204: { description: 'Renamed' } },
    handler: async (ctx) => {
      const c = await caller(deps, ctx);
      if (
        !(await deps.db.tx((q) =>
          renamePasskey(q, c.tenantId, c.user.id, ctx.params.id, ctx.body.name, ctx.requestId, deps.now()),
        ))
      )
        throw new AppError('PASSKEY_NOT_FOUND', 'no such passkey of yours');
      return { status: 204 };
    },
  });

const staffPasskeyRemoveRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('DELETE', '/auth/passkeys/{id}'),
    operationId: 'staffPasskeyRemove',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    params: Type.Object({ id: Uuid }),
    summary: 'Remove one of your passkeys (it can no longer sign in or step up)',
    responses: { 204: { description: 'Removed' } },
    handler: async (ctx) => {
      const c = await caller(deps, ctx);
      if (
        !(await deps.db.tx((q) =>
          removePasskey(q, c.tenantId, c.user.id, ctx.params.id, ctx.requestId, deps.now()),
        ))
      )
        throw new AppError('PASSKEY_NOT_FOUND', 'no such passkey of yours');
      return { status: 204 };
    },
  });

const staffSessionsRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/auth/sessions'),
    operationId: 'staffSessions',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    summary: "The signed-in person's live sessions",
    responses: {
      200: { description: 'Sessions', schema: Type.Object({ sessions: Type.Array(SessionView) }) },
    },
    handler: async (ctx) => {
      const c = await caller(deps, ctx);
      const sessions = (await listSessions(deps.db, c.tenantId, c.user.id, 'user')).map((s) => ({
        ...s,
        current: s.id === c.sessionId,
      }));
      return { status: 200, body: { sessions } };
    },
  });

const staffLogoutRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('POST', '/auth/logout'),
    operationId: 'staffLogout',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    bodyKind: 'json',
    summary: 'Sign out: revoke the current session',
    responses: { 204: { description: 'Signed out' } },
    handler: async (ctx) => {
      const c = await caller(deps, ctx);
      await deps.db.tx((q) =>
        revokeSession(
          q,
          c.tenantId,
          c.sessionId,
          'logout',
          { type: 'staff', id: staffSubject(c.user.id) },
          deps.now(),
        ),
      );
      return { status: 204 };
    },
  });

const staffMfaChallengeRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('POST', '/auth/mfa/challenge'),
    operationId: 'staffMfaChallenge',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    body: NamedRequest,
    summary:
      'A step-up challenge bound to the named request (method, path with query, body) and passkey options for it',
    responses: {
      200: {
        description: 'Challenge',
        schema: Type.Object({
          challenge: Type.String(),
          methods: Type.Array(Type.String()),
          orig: Type.String(),
          expiresIn: Type.Integer(),
          publicKey: Options,
        }),
      },
    },
    handler: async (ctx) => ({
      status: 200,
      body: await staffStepUpChallenge(deps, await caller(deps, ctx), ctx.body, originOf(ctx)),
    }),
  });

const staffMfaCompleteRoute = (deps: StaffDeps): RouteSpec =>
  defineRoute({
    ...declared('POST', '/auth/mfa/complete'),
    operationId: 'staffMfaComplete',
    tags,
    headers: bearerHeader,
    credential: staffPerson,
    body: Type.Object(
      { challengeToken: Jwt, response: AuthenticationResponse },
      { additionalProperties: false },
    ),
    summary:
      'Exchange a passkey assertion over a challenge for a short AAL 2 token bound to its request, used once',
    responses: {
      200: {
        description: 'AAL 2 token',
        schema: Type.Object({
          accessToken: Type.String(),
          expiresIn: Type.Integer(),
          aal: Type.Literal(2),
          orig: Type.String(),
        }),
      },
    },
    handler: async (ctx) => ({
      status: 200,
      body: await staffStepUpComplete(
        deps,
        await caller(deps, ctx),
        ctx.body.challengeToken,
        ctx.body.response,
        originOf(ctx),
      ),
    }),
  });

export function staffAuthRoutes(deps: StaffDeps, loginMethods: LoginMethod[] = []): RouteSpec[] {
  return [
    staffLoginRoute(deps, loginMethods),
    staffEnrolmentBeginRoute(deps),
    staffEnrolmentFinishRoute(deps),
    staffPasskeysRoute(deps),
    staffPasskeyRenameRoute(deps),
    staffPasskeyRemoveRoute(deps),
    staffSessionsRoute(deps),
    staffLogoutRoute(deps),
    staffMfaChallengeRoute(deps),
    staffMfaCompleteRoute(deps),
  ];
}
