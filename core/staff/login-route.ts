/**
 * `POST /auth/login` (SPEC 4.4): one route, several sign-in methods, told apart by the body's
 * `method`. Each method contributes its body schemas and a handler; this module only dispatches,
 * so federation (`method: "federation"`, core/staff/federation-routes.ts) joins with its own entry.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { TenantId } from '../../shared/tenant-id.ts';
import { defineRoute, type RequestContext, type Reply, type RouteSpec } from '../http/route.ts';
import { clientIpOf } from '../identity/context.ts';
import { passkeyLoginBegin, passkeyLoginFinish, type StaffDeps } from './passkey-auth.ts';
import { AuthenticationResponse } from './webauthn.ts';
import { signInBinding } from '../http/dpop.ts';
import { tenantSettings } from '../identity/settings.ts';
import { declared } from '../http/declared.ts';

const PasskeyBegin = Type.Object(
  { method: Type.Literal('passkey'), step: Type.Literal('begin'), tenantId: TenantId },
  { additionalProperties: false },
);
const PasskeyFinish = Type.Object(
  {
    method: Type.Literal('passkey'),
    step: Type.Literal('finish'),
    tenantId: TenantId,
    response: AuthenticationResponse,
  },
  { additionalProperties: false },
);

type Ctx = RequestContext<unknown, unknown, unknown>;

export interface LoginMethod {
  method: string;
  bodies: TSchema[];
  /** The replies' schemas, for the OpenAPI document and the response check. */
  replies: TSchema[];
  handle(ctx: Ctx, body: { method: string }): Promise<Reply>;
}

const TokenPair = Type.Object({
  accessToken: Type.String(),
  refreshToken: Type.String(),
  tokenType: Type.String(),
  expiresIn: Type.Integer(),
  sessionId: Type.String(),
  aal: Type.Integer(),
});

const passkey = (deps: StaffDeps): LoginMethod => ({
  method: 'passkey',
  bodies: [PasskeyBegin, PasskeyFinish],
  replies: [Type.Object({ options: Type.Record(Type.String(), Type.Unknown()) }), TokenPair],
  handle: async (ctx, raw) => {
    const body = raw as Static<typeof PasskeyBegin> | Static<typeof PasskeyFinish>;
    if (body.step === 'begin')
      return { status: 200, body: { options: await passkeyLoginBegin(deps, body.tenantId) } };
    const pop = await signInBinding(deps, ctx, await tenantSettings(deps.db, body.tenantId));
    return {
      status: 200,
      body: await passkeyLoginFinish(
        deps,
        body.tenantId,
        body.response,
        { ip: clientIpOf(ctx), requestId: ctx.requestId },
        pop,
      ),
    };
  },
});

/** `/auth/login` with passkeys and the other methods given (federation). */
export function staffLoginRoute(deps: StaffDeps, others: LoginMethod[] = []): RouteSpec {
  const loginMethods = [passkey(deps), ...others];
  return defineRoute({
    ...declared('POST', '/auth/login'),
    operationId: 'staffLogin',
    tags: ['staff-auth'],
    body: Type.Union(loginMethods.flatMap((m) => m.bodies)),
    summary:
      'Staff sign-in: `method` picks passkey (WebAuthn begin/finish) or federation; returns access and refresh tokens',
    responses: {
      200: {
        description: 'Passkey options (begin), tokens (finish), or the provider URL (federation)',
        schema: Type.Union(loginMethods.flatMap((m) => m.replies)),
      },
    },
    handler: async (ctx) => {
      const body = ctx.body as { method: string };
      const m = loginMethods.find((x) => x.method === body.method);
      if (!m) throw new AppError('VALIDATION_FAILED', 'unknown sign-in method');
      return m.handle(ctx, body);
    },
  });
}
