/**
 * /v1/agent/auth/* (SPEC 4.5 auth group, 5.3). Device binding: OTP request → OTP verify
 * (returns a single-use bindToken, 10 min) → device-bind (registers the Ed25519 key; any
 * previously bound device and its sessions are revoked) → login with code + PIN + device proof.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { uuidv7 } from '../../shared/uuid.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { auditAuth, clientIpOf } from '../identity/context.ts';
import { PublicKeyInput, rawPublicKey } from '../identity/devices.ts';
import { checkOtp, issueOtp, otpTtlMs } from '../identity/otp.ts';
import { revokeSession } from '../identity/sessions.ts';
import { OpaqueToken, Otp, Pin, TenantId } from '../identity/schemas.ts';
import { tenantSettings } from '../identity/settings.ts';
import {
  admitAll,
  clearOtpRequirement,
  otpSendPolicy,
  otpVerifyPolicy,
  settleSuccess,
} from '../identity/throttle.ts';
import { agentKeyOf, agentLogin, agentRef, agentRefresh } from './auth.ts';
import { agentCaller, type AgentDeps } from './context.ts';
import { DeviceProof } from './device.ts';
import { declared } from '../http/declared.ts';

export const AgentCode = Type.String({
  pattern: '^[A-Z0-9]{4,16}$',
  description: 'Agent code (till number)',
});
const tags = ['agent-auth'];
const bindTtlMs = 10 * 60_000;
const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest();

const TokenPairSchema = Type.Object({
  accessToken: Type.String(),
  refreshToken: Type.String(),
  expiresIn: Type.Integer(),
  sessionId: Type.String(),
  aal: Type.Integer(),
  agentId: Type.String(),
  tokenType: Type.Optional(Type.Union([Type.Literal('Bearer'), Type.Literal('DPoP')])),
});
const LoginBody = Type.Object(
  { tenantId: TenantId, agentCode: AgentCode, pin: Pin, device: DeviceProof },
  { additionalProperties: false },
);
const RefreshBody = Type.Object(
  { tenantId: TenantId, refreshToken: OpaqueToken, device: DeviceProof },
  { additionalProperties: false },
);
const OtpRequestBody = Type.Object(
  { tenantId: TenantId, agentCode: AgentCode },
  { additionalProperties: false },
);
const OtpVerifyBody = Type.Object(
  { tenantId: TenantId, agentCode: AgentCode, otp: Otp },
  { additionalProperties: false },
);
const BindBody = Type.Object(
  {
    tenantId: TenantId,
    agentCode: AgentCode,
    bindToken: OpaqueToken,
    publicKey: PublicKeyInput,
    label: Type.Optional(Type.String({ maxLength: 64 })),
  },
  { additionalProperties: false },
);

interface AgentLite {
  id: string;
  phone_e164: string;
  status: string;
}

const agentOf = async (db: AgentDeps['db'], tenantId: string, code: string) =>
  (
    await db.query<AgentLite>(
      'SELECT id, phone_e164, status FROM agents WHERE tenant_id = $1 AND code = $2',
      [tenantId, code],
    )
  ).rows[0];
const secretsOf = async ({ db, identity }: AgentDeps, tenantId: string) =>
  (await tenantSettings(db, tenantId))?.active ? identity.secrets.get(tenantId) : undefined;

function agentLoginRoute(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/agent/auth/login'),
    operationId: 'agentLogin',
    tags,
    body: LoginBody,
    summary:
      'Log in with agent code + PIN and a signature from the bound device (AAL 2); uniform 401 for every credential failure',
    responses: { 200: { description: 'Session created', schema: TokenPairSchema } },
    handler: async (ctx) => ({ status: 200, body: await agentLogin(deps, ctx, ctx.body) }),
  });
}

function agentRefreshRoute(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/agent/auth/refresh'),
    operationId: 'agentRefresh',
    tags,
    body: RefreshBody,
    summary:
      'Rotate the refresh token (with a fresh device proof); reuse of a rotated token revokes the session',
    responses: { 200: { description: 'New token pair', schema: TokenPairSchema } },
    handler: async (ctx) => ({
      status: 200,
      body: await agentRefresh(deps, ctx, ctx.body.tenantId, ctx.body.refreshToken, ctx.body.device),
    }),
  });
}

function agentLogout(deps: AgentDeps): RouteSpec {
  const { db, now } = deps;
  return defineRoute({
    ...declared('POST', '/v1/agent/auth/logout'),
    operationId: 'agentLogout',
    tags,
    bodyKind: 'json',
    headers: [{ name: 'Authorization', required: true, description: 'Bearer <agent access token>' }],
    summary: 'Revoke the current agent session',
    responses: { 204: { description: 'Logged out' } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      await db.tx((q) =>
        revokeSession(q, c.tenantId, c.sessionId, 'logout', { type: 'agent', id: c.agentId }, now()),
      );
      return { status: 204 };
    },
  });
}

function agentOtpRequest(deps: AgentDeps): RouteSpec {
  const { db, now, identity } = deps;
  return defineRoute({
    ...declared('POST', '/v1/agent/auth/otp/request'),
    operationId: 'agentOtpRequest',
    tags,
    body: OtpRequestBody,
    summary: "Send a one-time code to the agent's registered phone (202 whether or not the code exists)",
    responses: { 202: { description: 'Accepted', schema: Type.Object({ expiresIn: Type.Integer() }) } },
    handler: async (ctx) => {
      const { tenantId, agentCode } = ctx.body;
      const secrets = await secretsOf(deps, tenantId);
      const accepted = { status: 202, body: { expiresIn: otpTtlMs / 1000 } };
      if (!secrets) return accepted;
      const key = agentKeyOf(secrets, tenantId, agentCode);
      const t = now();
      const locked = await db.tx(async (q) => {
        const g = await admitAll(q, tenantId, [{ scope: 'otp_send', key, policy: otpSendPolicy }], t);
        const agent = g.ok ? await agentOf(db, tenantId, agentCode) : undefined;
        if (g.ok && agent?.status === 'active') {
          const code = await issueOtp(q, { tenantId, phoneKey: key, purpose: 'verify' }, secrets.otp, t);
          await identity.sms.send(
            q,
            {
              tenantId,
              to: agent.phone_e164,
              code,
              text: `Your agent verification code is ${code}`,
              purpose: 'agent-verify',
            },
            t,
          );
        }
        await auditAuth(
          q,
          {
            tenantId,
            action: 'agent.auth.otp_request',
            actor: { type: 'anonymous', id: agentRef(key) },
            target: { type: 'agent_code', id: agentRef(key) },
            allow: g.ok,
            attrs: { ip: clientIpOf(ctx), outcome: g.ok ? (agent ? 'sent' : 'unknown') : g.reason },
            requestId: ctx.requestId,
          },
          t,
        );
        return !g.ok ? g : undefined;
      });
      if (locked && locked.reason === 'locked')
        throw new AppError('LOCKED', 'too many codes requested; try later', {
          headers: { 'retry-after': String(locked.retryAfterS) },
        });
      return accepted;
    },
  });
}

function agentOtpVerify(deps: AgentDeps): RouteSpec {
  const { db, now } = deps;
  return defineRoute({
    ...declared('POST', '/v1/agent/auth/otp/verify'),
    operationId: 'agentOtpVerify',
    tags,
    body: OtpVerifyBody,
    summary: 'Verify the code; returns a single-use bindToken (10 minutes) for device-bind',
    responses: {
      200: {
        description: 'Verified',
        schema: Type.Object({ bindToken: Type.String(), expiresIn: Type.Integer() }),
      },
    },
    handler: async (ctx) => {
      const { tenantId, agentCode, otp } = ctx.body;
      const secrets = await secretsOf(deps, tenantId);
      if (!secrets) throw new AppError('OTP_INVALID', 'the code is wrong, expired or already used');
      const key = agentKeyOf(secrets, tenantId, agentCode);
      const checks = [{ scope: 'otp' as const, key, policy: otpVerifyPolicy }];
      const t = now();
      const r = await db.tx(async (q) => {
        const g = await admitAll(q, tenantId, checks, t);
        const target = { type: 'agent_code', id: agentRef(key) };
        if (!g.ok)
          return { kind: 'locked' as const, retryAfterS: g.reason === 'locked' ? g.retryAfterS : 60 };
        const agent = await agentOf(db, tenantId, agentCode);
        const ok =
          (await checkOtp(q, { tenantId, phoneKey: key, purpose: 'verify' }, otp, secrets.otp, t)) &&
          agent?.status === 'active';
        await auditAuth(
          q,
          {
            tenantId,
            action: 'agent.auth.otp_verify',
            actor: agent ? { type: 'agent', id: agent.id } : { type: 'anonymous', id: agentRef(key) },
            target,
            allow: ok,
            attrs: { ip: clientIpOf(ctx), outcome: ok ? 'verified' : 'bad_code' },
            requestId: ctx.requestId,
          },
          t,
        );
        if (!ok || !agent) return { kind: 'bad' as const };
        await settleSuccess(q, { tenantId, checks, at: t, epochs: g.epochs }, t);
        await clearOtpRequirement(q, tenantId, key);
        const token = randomBytes(32).toString('base64url');
        await q.query(
          `INSERT INTO agent_bind_tokens (id, tenant_id, agent_id, token_hash, created_at, expires_at)
             VALUES ($1, $2, $3, $4, to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0))`,
          [uuidv7(t), tenantId, agent.id, sha256(token), t, t + bindTtlMs],
        );
        return { kind: 'ok' as const, token };
      });
      if (r.kind === 'locked')
        throw new AppError('LOCKED', 'too many attempts; try later', {
          headers: { 'retry-after': String(r.retryAfterS) },
        });
      if (r.kind === 'bad') throw new AppError('OTP_INVALID', 'the code is wrong, expired or already used');
      return { status: 200, body: { bindToken: r.token, expiresIn: bindTtlMs / 1000 } };
    },
  });
}

function agentDeviceBind(deps: AgentDeps): RouteSpec {
  const { db, now } = deps;
  return defineRoute({
    ...declared('POST', '/v1/agent/auth/device-bind'),
    operationId: 'agentDeviceBind',
    tags,
    body: BindBody,
    summary:
      "Bind the device's Ed25519 public key (after an OTP); the previous device and its sessions are revoked",
    responses: { 201: { description: 'Bound', schema: Type.Object({ deviceId: Type.String() }) } },
    handler: async (ctx) => {
      const { tenantId, agentCode, bindToken, publicKey, label } = ctx.body;
      const raw = rawPublicKey(publicKey);
      const t = now();
      const deviceId = await db.tx(async (q) => {
        const { rows } = await q.query<{ id: string; agent_id: string }>(
          `SELECT b.id, b.agent_id FROM agent_bind_tokens b JOIN agents a ON a.tenant_id = b.tenant_id AND a.id = b.agent_id
              WHERE b.tenant_id = $1 AND b.token_hash = $2 AND a.code = $3 AND a.status = 'active' AND b.used_at IS NULL
                AND b.expires_at > to_timestamp($4 / 1000.0) FOR UPDATE OF b`,
          [tenantId, sha256(bindToken), agentCode, t],
        );
        const b = rows[0];
        if (!b) return undefined;
        const actor = { type: 'agent', id: b.agent_id };
        await q.query(
          'UPDATE agent_bind_tokens SET used_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
          [tenantId, b.id, t],
        );
        await q.query(
          'UPDATE agent_devices SET revoked_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND agent_id = $2 AND revoked_at IS NULL',
          [tenantId, b.agent_id, t],
        );
        const live = await q.query<{ id: string }>(
          `SELECT id FROM sessions WHERE tenant_id = $1 AND subject_type = 'agent' AND subject_id = $2 AND revoked_at IS NULL`,
          [tenantId, b.agent_id],
        );
        for (const s of live.rows) await revokeSession(q, tenantId, s.id, 'pin_reset', actor, t);
        const id = uuidv7(t);
        await q.query(
          'INSERT INTO agent_devices (id, tenant_id, agent_id, public_key, label, created_at) VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0))',
          [id, tenantId, b.agent_id, raw, label ?? null, t],
        );
        await auditAuth(
          q,
          {
            tenantId,
            action: 'agent.auth.device_bind',
            actor,
            target: { type: 'device', id },
            allow: true,
            attrs: { ip: clientIpOf(ctx), sessions_revoked: live.rows.length },
            requestId: ctx.requestId,
          },
          t,
        );
        return id;
      });
      if (!deviceId)
        throw new AppError('VERIFICATION_INVALID', 'bindToken is invalid, expired or already used');
      return { status: 201, body: { deviceId } };
    },
  });
}

export function agentAuthRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    agentLoginRoute(deps),
    agentRefreshRoute(deps),
    agentLogout(deps),
    agentOtpRequest(deps),
    agentOtpVerify(deps),
    agentDeviceBind(deps),
  ];
}
