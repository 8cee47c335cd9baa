/** Phone verification and PIN set (SPEC 3 "phone verification", 4.2, 5.2.1). */
import { createHash, randomBytes } from 'node:crypto';
import { ensureWallet } from '../ledger/wallets.ts';
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import { auditAuth, clientIpOf, phoneKeyOf, phoneRef, type IdentityDeps } from './context.ts';
import { checkOtp, issueOtp, otpTtlMs } from './otp.ts';
import { revokeSession } from './sessions.ts';
import { admitAll, clearOtpRequirement, otpSendPolicy, otpVerifyPolicy, settleSuccess } from './throttle.ts';
import { OpaqueToken, Otp, Phone, Pin, TenantId } from './schemas.ts';
import { tenantSettings } from './settings.ts';
import type { TenantSecrets } from './secrets.ts';
import type { PinHash } from './pin.ts';
import { utcMinute } from './pin-hold.ts';
import { declared } from '../http/declared.ts';

/** verificationToken lifetime: long enough to choose a PIN, short enough to be useless later. */
export const verificationTtlMs = 10 * 60_000;

const SendBody = Type.Object({ tenantId: TenantId, phone: Phone }, { additionalProperties: false });
const VerifyBody = Type.Object(
  { tenantId: TenantId, phone: Phone, otp: Otp },
  { additionalProperties: false },
);
const PinSetBody = Type.Object(
  { tenantId: TenantId, phone: Phone, pin: Pin, verificationToken: OpaqueToken },
  { additionalProperties: false },
);

const tags = ['customer-auth'];

/** PINs anyone would try first: one repeated digit, or a run up or down. */
export function isWeakPin(pin: string): boolean {
  const d = [...pin].map(Number);
  const same = d.every((x) => x === d[0]);
  const up = d.every((x, i) => i === 0 || x === ((d[i - 1] ?? 0) + 1) % 10);
  const down = d.every((x, i) => i === 0 || x === ((d[i - 1] ?? 0) + 9) % 10);
  return same || up || down;
}

const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest();

type Ctx<B extends TSchema> = RequestContext<unknown, unknown, Static<B>>;

const otpSend = (deps: IdentityDeps) => {
  const { db, now } = deps;
  return defineRoute({
    ...declared('POST', '/customers/auth/otp/send'),
    operationId: 'customerOtpSend',
    tags,
    summary: 'Send a phone verification code (6 digits, valid 5 minutes)',
    body: SendBody,
    responses: { 202: { description: 'Code sent', schema: Type.Object({ expiresIn: Type.Integer() }) } },
    handler: async (ctx) => {
      const { tenantId } = ctx.body;
      const secrets = (await tenantSettings(db, tenantId))?.active
        ? await deps.secrets.get(tenantId)
        : undefined;
      if (!secrets) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
      const t = now();
      const result = await db.tx((q) => sendCode(deps, q, ctx, secrets, t));
      if (!result.ok) {
        const retry = result.reason === 'locked' ? result.retryAfterS : 3600;
        throw new AppError('RATE_LIMITED', 'too many codes requested for this phone; try later', {
          headers: { 'retry-after': String(retry) },
        });
      }
      return { status: 202, body: { expiresIn: otpTtlMs / 1000 } };
    },
  });
};

/** The phone's send budget admitted, then the code issued, texted and audited (one transaction). */
async function sendCode(
  deps: IdentityDeps,
  q: TxClient,
  ctx: Ctx<typeof SendBody>,
  secrets: TenantSecrets,
  t: number,
) {
  const { tenantId, phone } = ctx.body;
  const phoneKey = phoneKeyOf(secrets, tenantId, phone);
  const gate = await admitAll(q, tenantId, [{ scope: 'otp_send', key: phoneKey, policy: otpSendPolicy }], t);
  const attrs = { ip: clientIpOf(ctx), phone: phoneRef(phoneKey) };
  if (!gate.ok) {
    await auditAuth(
      q,
      {
        tenantId,
        action: 'auth.otp_send',
        actor: { type: 'anonymous', id: phoneRef(phoneKey) },
        target: { type: 'phone', id: phoneRef(phoneKey) },
        allow: false,
        attrs: { ...attrs, outcome: 'rate_limited' },
        requestId: ctx.requestId,
      },
      t,
    );
    return gate;
  }
  const code = await issueOtp(q, { tenantId, phoneKey, purpose: 'verify' }, secrets.otp, t);
  await deps.sms.send(
    q,
    {
      tenantId,
      to: phone,
      code,
      purpose: 'verify',
      text: `Your verification code is ${code}. It expires in 5 minutes.`,
    },
    t,
  );
  await auditAuth(
    q,
    {
      tenantId,
      action: 'auth.otp_send',
      actor: { type: 'anonymous', id: phoneRef(phoneKey) },
      target: { type: 'phone', id: phoneRef(phoneKey) },
      allow: true,
      attrs: { ...attrs, outcome: 'sent' },
      requestId: ctx.requestId,
    },
    t,
  );
  return gate;
}

const otpVerify = (deps: IdentityDeps) => {
  const { db, now } = deps;
  return defineRoute({
    ...declared('POST', '/customers/auth/otp/verify'),
    operationId: 'customerOtpVerify',
    tags,
    summary: 'Verify the phone with the code; returns a single-use verificationToken for pin/set',
    body: VerifyBody,
    responses: {
      200: { description: 'Phone verified', schema: Type.Object({ verificationToken: Type.String() }) },
    },
    handler: async (ctx) => {
      const { tenantId } = ctx.body;
      const secrets = (await tenantSettings(db, tenantId))?.active
        ? await deps.secrets.get(tenantId)
        : undefined;
      if (!secrets) throw new AppError('OTP_INVALID', 'the code is wrong, expired or already used');
      const t = now();
      const result = await db.tx((q) => verifyCode(q, ctx, secrets, t));
      if (result.kind === 'locked')
        throw new AppError('LOCKED', 'too many attempts; try later', {
          headers: { 'retry-after': String(result.retryAfterS) },
        });
      if (result.kind === 'bad')
        throw new AppError('OTP_INVALID', 'the code is wrong, expired or already used');
      return { status: 200, body: { verificationToken: result.token } };
    },
  });
};

/** The code checked against the phone's attempts; a right one verifies the phone (one transaction). */
async function verifyCode(q: TxClient, ctx: Ctx<typeof VerifyBody>, secrets: TenantSecrets, t: number) {
  const { tenantId, phone, otp } = ctx.body;
  const phoneKey = phoneKeyOf(secrets, tenantId, phone);
  const checks = [{ scope: 'otp' as const, key: phoneKey, policy: otpVerifyPolicy }];
  const actor = { type: 'anonymous', id: phoneRef(phoneKey) };
  const target = { type: 'phone', id: phoneRef(phoneKey) };
  const base = { ip: clientIpOf(ctx), phone: phoneRef(phoneKey) };
  const refusal = (outcome: string) => ({
    tenantId,
    action: 'auth.otp_verify',
    actor,
    target,
    allow: false,
    attrs: { ...base, outcome },
    requestId: ctx.requestId,
  });
  const gate = await admitAll(q, tenantId, checks, t);
  if (!gate.ok) {
    await auditAuth(q, refusal('locked'), t);
    return { kind: 'locked' as const, retryAfterS: gate.reason === 'locked' ? gate.retryAfterS : 3600 };
  }
  if (!(await checkOtp(q, { tenantId, phoneKey, purpose: 'verify' }, otp, secrets.otp, t))) {
    await auditAuth(q, refusal('bad_code'), t);
    return { kind: 'bad' as const };
  }
  await settleSuccess(q, { tenantId, checks, at: t, epochs: gate.epochs }, t);
  const customerId = await markPhoneVerified(q, tenantId, phone, t);
  await clearOtpRequirement(q, tenantId, phoneKey);
  const token = randomBytes(32).toString('base64url');
  await q.query(
    `INSERT INTO phone_verifications (id, tenant_id, customer_id, token_hash, created_at, expires_at)
     VALUES ($1, $2, $3, $4, to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0))`,
    [uuidv7(t), tenantId, customerId, sha256(token), t, t + verificationTtlMs],
  );
  await auditAuth(
    q,
    {
      tenantId,
      action: 'auth.otp_verify',
      actor: { type: 'customer', id: customerId },
      target,
      allow: true,
      attrs: { ...base, outcome: 'verified' },
      requestId: ctx.requestId,
    },
    t,
  );
  return { kind: 'ok' as const, token };
}

/** The customer of this phone, created on first verification; its phone marked verified now. */
async function markPhoneVerified(q: Queryable, tenantId: string, phone: string, t: number): Promise<string> {
  const { rows } = await q.query<{ id: string }>(
    `INSERT INTO customers (id, tenant_id, phone_e164, phone_verified_at, created_at)
     VALUES ($1, $2, $3, to_timestamp($4 / 1000.0), to_timestamp($4 / 1000.0))
     ON CONFLICT (tenant_id, phone_e164) DO UPDATE SET phone_verified_at = EXCLUDED.phone_verified_at RETURNING id`,
    [uuidv7(t), tenantId, phone, t],
  );
  const customerId = rows[0]?.id;
  if (!customerId) throw new Error('customer upsert returned no row');
  return customerId;
}

const verificationLookup = `SELECT pv.id, pv.customer_id FROM phone_verifications pv JOIN customers c ON c.tenant_id = pv.tenant_id AND c.id = pv.customer_id
        WHERE pv.tenant_id = $1 AND pv.token_hash = $2 AND c.phone_e164 = $3 AND pv.used_at IS NULL AND pv.expires_at > to_timestamp($4 / 1000.0)`;

const pinSet = (deps: IdentityDeps) => {
  const { db, now } = deps;
  return defineRoute({
    ...declared('POST', '/customers/auth/pin/set'),
    operationId: 'customerPinSet',
    tags,
    summary: 'Set (or reset) the PIN with a verificationToken; revokes existing sessions',
    body: PinSetBody,
    responses: { 204: { description: 'PIN set' } },
    handler: async (ctx) => {
      const { tenantId, phone, pin, verificationToken } = ctx.body;
      const invalid = () =>
        new AppError('VERIFICATION_INVALID', 'verificationToken is invalid, expired or already used');
      const settings = await tenantSettings(db, tenantId);
      const secrets = settings?.active ? await deps.secrets.get(tenantId) : undefined;
      if (!settings || !secrets) throw invalid();
      const hash = sha256(verificationToken);
      const t = now();
      // Check the token before spending argon2 work on it; re-checked under lock below.
      if ((await db.query(verificationLookup, [tenantId, hash, phone, t])).rows.length === 0) throw invalid();
      if (isWeakPin(pin))
        throw new AppError('UNPROCESSABLE', 'PIN is too easy to guess (repeated or sequential digits)');
      const ph = await deps.pins.hash(pin, secrets.pin);
      const customerId = await db.tx((q) =>
        setPin(deps, q, ctx, { hash, ph, cooloffHours: settings.deviceCooloffHours }, t),
      );
      if (!customerId) throw invalid();
      return { status: 204 };
    },
  });
};

/** The verification used up, the PIN stored, the customer enrolled and their sessions revoked. */
async function setPin(
  deps: IdentityDeps,
  q: TxClient,
  ctx: Ctx<typeof PinSetBody>,
  s: { hash: Buffer; ph: PinHash; cooloffHours: number },
  t: number,
): Promise<string | undefined> {
  const { tenantId, phone } = ctx.body;
  const { rows } = await q.query<{ id: string; customer_id: string }>(
    `${verificationLookup} FOR UPDATE OF pv`,
    [tenantId, s.hash, phone, t],
  );
  const v = rows[0];
  if (!v) return undefined;
  await q.query(
    'UPDATE phone_verifications SET used_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
    [tenantId, v.id, t],
  );
  const holdUntil = await storePin(deps, q, { tenantId, phone, customerId: v.customer_id }, s, t);
  // SPEC 5.2.5: the policy requires membership of the tenant.
  await q.query(
    `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
     VALUES ($1, 'customer', $2, 'member', 'tenant', $1) ON CONFLICT DO NOTHING`,
    [tenantId, v.customer_id],
  );
  // Issue 7: a customer who can sign in has a WALLET_MAIN in the tenant's base currency.
  await ensureWallet(q, tenantId, v.customer_id, t);
  const actor = { type: 'customer', id: v.customer_id };
  const live = await q.query<{ id: string }>(
    `SELECT id FROM sessions WHERE tenant_id = $1 AND subject_type = 'customer' AND subject_id = $2 AND revoked_at IS NULL`,
    [tenantId, v.customer_id],
  );
  for (const row of live.rows) await revokeSession(q, tenantId, row.id, 'pin_reset', actor, t);
  await auditAuth(
    q,
    {
      tenantId,
      action: 'auth.pin_set',
      actor,
      target: { type: 'customer', id: v.customer_id },
      allow: true,
      attrs: {
        ip: clientIpOf(ctx),
        kdf_version: s.ph.kdfVersion,
        sessions_revoked: live.rows.length,
        reset: holdUntil !== null,
        ...(holdUntil ? { hold_until: holdUntil.toISOString() } : {}),
      },
      requestId: ctx.requestId,
    },
    t,
  );
  return v.customer_id;
}

/** The PIN hash stored; a reset (a PIN existed) is held and told to the phone. Returns the hold's end. */
async function storePin(
  deps: IdentityDeps,
  q: Queryable,
  who: { tenantId: string; phone: string; customerId: string },
  s: { ph: PinHash; cooloffHours: number },
  t: number,
): Promise<Date | null> {
  const { tenantId, phone, customerId } = who;
  const { ph } = s;
  const prior = await q.query(
    'SELECT 1 FROM credentials WHERE tenant_id = $1 AND customer_id = $2 FOR UPDATE',
    [tenantId, customerId],
  );
  // Issue 13 item 1: replacing a PIN by SMS alone is what a SIM swap allows, so the new PIN
  // authorises no money for the tenant's device cool-off (the same setting as a new device
  // key: same threat, same time to read the notice); a first enrolment is not held.
  const holdUntil = prior.rows.length > 0 ? new Date(t + s.cooloffHours * 3_600_000) : null;
  await q.query(
    `INSERT INTO credentials (customer_id, tenant_id, pin_hash, pin_salt, kdf_version, pin_set_at, pin_reset_hold_until)
     VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), $7)
     ON CONFLICT (customer_id) DO UPDATE SET pin_hash = EXCLUDED.pin_hash, pin_salt = EXCLUDED.pin_salt,
       kdf_version = EXCLUDED.kdf_version, pin_set_at = EXCLUDED.pin_set_at, pin_reset_hold_until = EXCLUDED.pin_reset_hold_until`,
    [customerId, tenantId, ph.hash, ph.salt, ph.kdfVersion, t, holdUntil],
  );
  // The verified phone is told in this transaction (a failed send rolls the reset back); no code in it.
  if (holdUntil)
    await deps.sms.send(
      q,
      {
        tenantId,
        to: phone,
        purpose: 'pin_changed',
        text: `Your mobile money PIN was changed. It can approve payments from ${utcMinute(holdUntil)} UTC. If this was not you, call us now.`,
      },
      t,
    );
  return holdUntil;
}

export function phoneRoutes(deps: IdentityDeps): RouteSpec[] {
  return [otpSend(deps), otpVerify(deps), pinSet(deps)];
}
