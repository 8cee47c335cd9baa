/**
 * Agent login and refresh (SPEC 5.3; issue 9 item 1), built from the customer identity blocks:
 * argon2id PIN check through the shared PinHasher (its semaphore), the lockout counters of
 * throttle.ts (per agent code HMAC and device; the source address throttled past a
 * carrier-NAT-sized threshold, address-throttle.ts), the sessions and refresh-token
 * tables, access tokens from tokens.ts. Guarantees, as for customers:
 * - Unknown tenant or agent, suspended agent, wrong PIN, unbound device and bad device proof
 *   all answer the same 401 INVALID_CREDENTIALS after the same argon2 work.
 * - Every attempt is audited (outcome in attrs; never the PIN, OTP or a token).
 * - A right PIN overtaken by attempts counted since its admission (a lock or the OTP requirement
 *   they made; throttle.ts settleSuccess) opens no session: it is answered their refusal.
 * - A session is subject_type 'agent'; its access token is AAL 2 (PIN + bound device key).
 * - Refresh rotates; a rotated token presented again revokes the session; refresh also needs
 *   a fresh device proof, so a stolen refresh token alone is useless.
 */
import { dpopRefusal, sessionKey, signInBinding } from '../http/dpop.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { auditAuth, clientIpOf } from '../identity/context.ts';
import { addressCheck } from '../identity/address-throttle.ts';
import { gated } from '../identity/login.ts';
import { lookupKey, type TenantSecrets } from '../identity/secrets.ts';
import { insertRefreshToken, revokeSession, sessionMaxAgeMs } from '../identity/sessions.ts';
import { tenantSettings } from '../identity/settings.ts';
import {
  admitAll,
  judgedAttempt,
  loginPolicy,
  phonePolicy,
  refusalError,
  settleFailure,
  settleSuccess,
  type Admitted,
  type Check,
  type Refusal,
} from '../identity/throttle.ts';
import { accessTtlS, hashRefreshToken, issueAccessToken } from '../identity/tokens.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import type { AgentDeps, AnyCtx } from './context.ts';
import { checkDeviceProof, type DeviceProof } from './device.ts';

export interface TokenPair {
  accessToken: string;
  refreshToken: string;
  expiresIn: number;
  /** `DPoP` when bound to the proof's key (issue 17 item 3), else `Bearer`. */
  tokenType: 'Bearer' | 'DPoP';
  sessionId: string;
  aal: number;
  agentId: string;
}

interface AgentRow {
  id: string;
  code: string;
  status: string;
  pin_hash: Buffer;
  pin_salt: Buffer;
  kdf_version: number;
}

const invalid = () => new AppError('INVALID_CREDENTIALS', 'invalid credentials');

/** The HMAC key under which an agent code is counted and referenced (never the code itself). */
export function agentKeyOf(s: TenantSecrets, tenantId: string, code: string): Buffer {
  return lookupKey(s.lookup, 'agent', tenantId, code);
}

export const agentRef = (key: Buffer) => `agk_${key.subarray(0, 12).toString('base64url')}`;

export async function findAgentByCode(
  q: Queryable,
  tenantId: string,
  code: string,
): Promise<AgentRow | undefined> {
  const { rows } = await q.query<AgentRow>(
    'SELECT id, code, status, pin_hash, pin_salt, kdf_version FROM agents WHERE tenant_id = $1 AND code = $2',
    [tenantId, code],
  );
  return rows[0];
}

/** Insert an agent session and the first refresh token of its family. */
async function createAgentSession(
  q: Queryable,
  s: {
    id: string;
    tenantId: string;
    agentId: string;
    jti: string;
    device: string;
    ip: string;
    dpopJkt: string | undefined;
  },
  now: number,
): Promise<string> {
  await q.query(
    `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, mfa_pending, device, ip, created_at, last_seen, dpop_jkt)
     VALUES ($1, $2, 'agent', $3, $4, 2, false, $5, $6, to_timestamp($7 / 1000.0), to_timestamp($7 / 1000.0), $8)`,
    [s.id, s.tenantId, s.agentId, s.jti, s.device, s.ip, now, s.dpopJkt ?? null],
  );
  return insertRefreshToken(q, s.tenantId, s.id, uuidv7(now), now, now + sessionMaxAgeMs);
}

export interface LoginInput {
  tenantId: string;
  agentCode: string;
  pin: string;
  device: DeviceProof;
}

/** The PIN check, with the same argon2 work whether or not the agent is usable (uniform 401). */
async function pinMatches(
  { identity }: AgentDeps,
  secrets: TenantSecrets,
  usable: AgentRow | undefined,
  pin: string,
): Promise<boolean> {
  return usable
    ? await gated(() =>
        identity.pins.verify(pin, secrets.pin, {
          hash: usable.pin_hash,
          salt: usable.pin_salt,
          kdfVersion: usable.kdf_version,
        }),
      )
    : await gated(() => identity.pins.verifyDummy(pin, secrets.pin));
}

interface LoginSuccess {
  tenantId: string;
  agentId: string;
  device: string;
  ip: string;
  requestId: string;
  pop: { jkt: string } | undefined;
  /** The attempt as admitted: its counts are taken back. */
  admitted: Admitted;
}

/**
 * A login that passed every check, in its transaction: the counters settled, the AAL 2 access
 * token, the session with its first refresh token, and the success audited. Attempts counted
 * since its admission that locked the agent code or device, or made the code need an OTP, overtake
 * it (throttle.ts settleSuccess): their refusal is answered instead, and no session opened.
 */
async function openAgentSession(
  deps: AgentDeps,
  q: TxClient,
  s: LoginSuccess,
  t: number,
): Promise<TokenPair | Refusal> {
  const { tenantId, pop, ip } = s;
  const settled = await settleSuccess(q, s.admitted, deps.now);
  if (!settled.ok) return settled;
  const actor = { type: 'agent', id: s.agentId };
  const sessionId = uuidv7(t);
  const access = await issueAccessToken(
    deps.keys,
    {
      tenantId,
      sub: s.agentId,
      sid: sessionId,
      aal: 2,
      amr: ['pin', 'device'],
      ...(pop ? { cnf: { jkt: pop.jkt } } : {}),
    },
    t,
  );
  const refreshToken = await createAgentSession(
    q,
    {
      id: sessionId,
      tenantId,
      agentId: s.agentId,
      jti: access.jti,
      device: s.device,
      ip,
      dpopJkt: pop?.jkt,
    },
    t,
  );
  await auditAuth(
    q,
    {
      tenantId,
      action: 'agent.auth.login',
      actor,
      target: { type: 'session', id: sessionId },
      allow: true,
      aal: 2,
      attrs: { ip, device: s.device, outcome: 'success' },
      requestId: s.requestId,
    },
    t,
  );
  return {
    accessToken: access.token,
    refreshToken,
    expiresIn: accessTtlS,
    tokenType: pop ? ('DPoP' as const) : ('Bearer' as const),
    sessionId,
    aal: 2,
    agentId: s.agentId,
  };
}

/** What an agent's sign-in is counted against: the agent code, the source address, the device. */
function agentLoginChecks(
  secrets: TenantSecrets,
  tenantId: string,
  agentKey: Buffer,
  ip: string,
  settings: NonNullable<Awaited<ReturnType<typeof tenantSettings>>>,
  deviceId: string,
): Check[] {
  return [
    { scope: 'phone', key: agentKey, policy: phonePolicy },
    addressCheck(secrets, tenantId, ip, settings.addressThrottle),
    { scope: 'device', key: lookupKey(secrets.lookup, 'device', tenantId, deviceId), policy: loginPolicy },
  ];
}

/** The audit record of an agent's login outcome (the agent code by reference only, never in clear). */
function agentLoginAudit(
  ctx: AnyCtx,
  tenantId: string,
  agentKey: Buffer,
  attrs: { ip: string; device: string },
) {
  const anon = { type: 'anonymous', id: agentRef(agentKey) };
  const target = { type: 'agent_code', id: agentRef(agentKey) };
  const audit = (q: TxClient, allow: boolean, outcome: string, t: number, actor = anon) =>
    auditAuth(
      q,
      {
        tenantId,
        action: 'agent.auth.login',
        actor,
        target,
        allow,
        attrs: { ...attrs, outcome },
        requestId: ctx.requestId,
        ...(allow ? { aal: 2 } : {}),
      },
      t,
    );
  return { anon, audit };
}

export async function agentLogin(deps: AgentDeps, ctx: AnyCtx, input: LoginInput): Promise<TokenPair> {
  const { db, identity } = deps;
  const { tenantId, agentCode, pin, device } = input;
  const settings = await tenantSettings(db, tenantId);
  const secrets = settings?.active ? await identity.secrets.get(tenantId) : undefined;
  if (!settings || !secrets) {
    await gated(() => identity.pins.verifyDummy(pin, undefined));
    throw invalid();
  }
  // Issue 17 item 3: the same rule as customers (core/identity/login.ts).
  const pop = await signInBinding(deps, ctx, settings);
  const ip = clientIpOf(ctx);
  const agentKey = agentKeyOf(secrets, tenantId, agentCode);
  const checks = agentLoginChecks(secrets, tenantId, agentKey, ip, settings, device.deviceId);
  const { anon, audit } = agentLoginAudit(ctx, tenantId, agentKey, { ip, device: device.deviceId });

  const start = deps.now();
  const gate = await db.tx(async (q) => {
    const g = await admitAll(q, tenantId, checks, start);
    if (!g.ok) await audit(q, false, g.reason, start);
    return g;
  });
  if (!gate.ok) throw refusalError(gate);
  const admitted = { tenantId, checks, at: start, epochs: gate.epochs };
  // Counted on admission; taken back if the service fails before the attempt is answered (a
  // busy PIN queue, a database that does not answer): only the agent's own failures count.
  return judgedAttempt(deps, admitted, async (answered) => {
    const row = await findAgentByCode(db, tenantId, agentCode);
    const usable = row && row.status === 'active' ? row : undefined;
    const pinOk = await pinMatches(deps, secrets, usable, pin);
    const t = deps.now();
    // A PIN judged wrong stays counted, whatever becomes of its record.
    if (!usable || !pinOk) answered();
    const result = await db.tx(async (q) => {
      if (!usable || !pinOk) {
        await settleFailure(q, tenantId, checks, t);
        await audit(
          q,
          false,
          usable ? 'bad_pin' : 'unknown_or_inactive',
          t,
          usable ? { type: 'agent', id: usable.id } : anon,
        );
        return undefined;
      }
      const actor = { type: 'agent', id: usable.id };
      if (!(await checkDeviceProof(q, 'agent-login', tenantId, usable, device, t))) {
        await settleFailure(q, tenantId, checks, t);
        await audit(q, false, 'device_not_bound_or_bad_proof', t, actor);
        return undefined;
      }
      const opened = await openAgentSession(
        deps,
        q,
        {
          tenantId,
          agentId: usable.id,
          device: device.deviceId,
          ip,
          requestId: ctx.requestId,
          pop,
          admitted,
        },
        t,
      );
      if ('reason' in opened) await audit(q, false, opened.reason, deps.now(), actor);
      return opened;
    });
    answered();
    if (!result) throw invalid();
    if ('reason' in result) throw refusalError(result);
    return result;
  });
}

interface RefreshRow {
  id: string;
  session_id: string;
  family_id: string;
  expires_at: Date;
  rotated_at: Date | null;
  revoked_at: Date | null;
  subject_id: string;
  last_seen: Date;
  session_revoked_at: Date | null;
  device: string | null;
  code: string;
  dpop_jkt: string | null;
}

/**
 * The refresh that passed every check, in its transaction: the presented token marked rotated,
 * its successor in the same family, a new access token, and the session's jti, last use and key.
 */
async function rotateRefresh(
  deps: AgentDeps,
  q: Queryable,
  s: { tenantId: string; r: RefreshRow; jkt: string | undefined; ip: string },
  t: number,
): Promise<TokenPair> {
  const { tenantId, r, jkt, ip } = s;
  await q.query(
    'UPDATE refresh_tokens SET rotated_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
    [tenantId, r.id, t],
  );
  const next = await insertRefreshToken(q, tenantId, r.session_id, r.family_id, t, r.expires_at.getTime());
  const access = await issueAccessToken(
    deps.keys,
    {
      tenantId,
      sub: r.subject_id,
      sid: r.session_id,
      aal: 2,
      amr: ['pin', 'device'],
      ...(jkt ? { cnf: { jkt } } : {}),
    },
    t,
  );
  await q.query(
    'UPDATE sessions SET jti = $3, last_seen = to_timestamp($4 / 1000.0), ip = $5, dpop_jkt = $6 WHERE tenant_id = $1 AND id = $2',
    [tenantId, r.session_id, access.jti, t, ip, jkt ?? null],
  );
  return {
    accessToken: access.token,
    refreshToken: next,
    expiresIn: accessTtlS,
    tokenType: jkt ? ('DPoP' as const) : ('Bearer' as const),
    sessionId: r.session_id,
    aal: 2,
    agentId: r.subject_id,
  };
}

/** Rotate an agent refresh token (needs a fresh proof from the session's bound device). */
export async function agentRefresh(
  deps: AgentDeps,
  ctx: AnyCtx,
  tenantId: string,
  token: string,
  device: DeviceProof,
): Promise<TokenPair> {
  const settings = await tenantSettings(deps.db, tenantId);
  const refused = () => new AppError('INVALID_REFRESH_TOKEN', 'refresh token is invalid, expired or revoked');
  if (!settings?.active) throw refused();
  const pop = await signInBinding(deps, ctx, settings);
  const t = deps.now();
  const ip = clientIpOf(ctx);
  let keyMismatch = false;
  const out = await deps.db.tx(async (q) => {
    const { rows } = await q.query<RefreshRow>(
      `SELECT r.id, r.session_id, r.family_id, r.expires_at, r.rotated_at, r.revoked_at, s.subject_id, s.last_seen,
              s.revoked_at AS session_revoked_at, s.device, a.code, s.dpop_jkt
         FROM refresh_tokens r JOIN sessions s ON s.tenant_id = r.tenant_id AND s.id = r.session_id
         JOIN agents a ON a.tenant_id = s.tenant_id AND a.id::text = s.subject_id
        WHERE r.tenant_id = $1 AND r.token_hash = $2 AND s.subject_type = 'agent' FOR UPDATE OF r, s`,
      [tenantId, hashRefreshToken(token)],
    );
    const r = rows[0];
    if (!r) return undefined;
    const note = (allow: boolean, outcome: string) =>
      auditAuth(
        q,
        {
          tenantId,
          action: 'agent.auth.refresh',
          actor: { type: 'agent', id: r.subject_id },
          target: { type: 'session', id: r.session_id },
          allow,
          attrs: { ip, outcome, family: r.family_id },
          requestId: ctx.requestId,
        },
        t,
      );
    if (r.rotated_at) {
      await q.query(
        'UPDATE refresh_tokens SET revoked_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND family_id = $2 AND revoked_at IS NULL',
        [tenantId, r.family_id, t],
      );
      await revokeSession(q, tenantId, r.session_id, 'refresh_replay', { type: 'system', id: 'agents' }, t);
      await note(false, 'replay_detected_family_revoked');
      return undefined;
    }
    if (r.revoked_at || r.session_revoked_at || r.expires_at.getTime() <= t) {
      await note(false, 'revoked_or_expired');
      return undefined;
    }
    if (t - r.last_seen.getTime() > settings.sessionTimeoutMinutes * 60_000) {
      await revokeSession(q, tenantId, r.session_id, 'idle_timeout', { type: 'system', id: 'agents' }, t);
      await note(false, 'idle_timeout');
      return undefined;
    }
    if (
      device.deviceId !== r.device ||
      !(await checkDeviceProof(q, 'agent-refresh', tenantId, { id: r.subject_id, code: r.code }, device, t))
    ) {
      await note(false, 'bad_device_proof');
      return undefined;
    }
    const key = sessionKey(r.dpop_jkt, pop);
    if (!key.ok) {
      keyMismatch = true;
      await note(false, 'dpop_key_mismatch');
      return undefined;
    }
    const pair = await rotateRefresh(deps, q, { tenantId, r, jkt: key.jkt, ip }, t);
    await note(true, 'rotated');
    return pair;
  });
  if (keyMismatch)
    throw dpopRefusal(
      deps,
      'invalid_dpop_proof',
      'this refresh token is bound to a DPoP key: send a proof by it',
    );
  if (!out) throw refused();
  return out;
}
