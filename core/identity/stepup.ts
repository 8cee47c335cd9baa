/**
 * Step-up completion (SPEC 3 "step-up complete", 4.2, 7.2). Order of checks:
 *   1. bearer access token of a live session (401, the codes of shared/access-token.ts)
 *   2. challenge signature, expiry, kind, tenant and subject (403 challenge_mismatch)
 *   3. exactly one method, and one the challenge offers (400 / 403 challenge_mismatch)
 *   4. challenge not used before (403 challenge_mismatch)
 *   5. OTP bound to this challenge (401 OTP_INVALID, attempts counted) or device signature
 *      (401 DEVICE_ASSERTION_INVALID; 403 DEVICE_COOLING_OFF for a valid key still in its
 *      cool-off, issue 13 item 1: an OTP step-up never shortens it)
 *   6. during a PIN-reset hold (pin-hold.ts), 403 PIN_RESET_HOLD unless the factor is a device key
 *      usable before the reset: a SIM swapper holds the OTPs, the customer's own phone does not change
 * Then, in one transaction: the challenge jti is recorded (single use), the session moves to
 * AAL 2 with the new token's jti, and an audit record is written.
 */
import { AppError } from '../../shared/errors.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import type { RequestContext } from '../http/route.ts';
import type { Static } from '@sinclair/typebox';
import { verifyChallenge, type ChallengeClaims, type StepUpMethod } from '../../shared/challenge.ts';
import { auditAuth, clientIpOf, phoneKeyOf, type IdentityDeps } from './context.ts';
import { coolingOff, verifyDeviceAssertion, type DeviceAssertion } from './devices.ts';
import { checkOtp, issueOtp } from './otp.ts';
import { pinHeld, pinResetHold } from './pin-hold.ts';
import { lookupKey } from './secrets.ts';
import { admitAll, otpVerifyPolicy, settleSuccess, stepUpSendPolicy } from './throttle.ts';
import { accessTtlS, authenticate, issueAccessToken, type Caller } from './tokens.ts';

export interface StepUpInput {
  challengeToken: string;
  otp?: string | null;
  deviceAssertion?: Static<typeof DeviceAssertion> | null;
}

async function phoneOf(
  deps: IdentityDeps,
  caller: Caller,
): Promise<{ phone: string; key: Buffer; sendKey: Buffer; otpKey: Buffer }> {
  const secrets = await deps.secrets.get(caller.tenantId);
  const { rows } = await deps.db.query<{ phone_e164: string }>(
    'SELECT phone_e164 FROM customers WHERE tenant_id = $1 AND id = $2',
    [caller.tenantId, caller.customerId],
  );
  const phone = rows[0]?.phone_e164;
  if (!secrets || !phone) throw new AppError('session_revoked', 'session is revoked or unknown');
  return {
    phone,
    key: phoneKeyOf(secrets, caller.tenantId, phone),
    otpKey: secrets.otp,
    // Step-up codes have their own daily allowance (throttle.ts stepUpCodesPerDay), counted apart
    // from enrolment codes so a day of payments cannot use up phone verification or vice versa.
    sendKey: lookupKey(secrets.lookup, 'stepup_send', caller.tenantId, phone),
  };
}

/** Send an OTP bound to a challenge the caller holds (POST /customers/auth/stepup/otp). */
export async function sendStepUpOtp(
  deps: IdentityDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  challengeToken: string,
): Promise<void> {
  const caller = await authenticate(deps, ctx);
  const claims = await verifyChallenge(deps.keys.challenges, challengeToken, {
    tenantId: caller.tenantId,
    sub: caller.customerId,
  });
  if (!claims.methods.includes('otp'))
    throw new AppError('challenge_mismatch', 'this challenge does not offer OTP');
  const p = await phoneOf(deps, caller);
  const t = deps.now();
  const gate = await deps.db.tx(async (q) => {
    const g = await admitAll(
      q,
      caller.tenantId,
      [{ scope: 'otp_send', key: p.sendKey, policy: stepUpSendPolicy }],
      t,
    );
    if (g.ok) {
      const code = await issueOtp(
        q,
        { tenantId: caller.tenantId, phoneKey: p.key, purpose: 'stepup', challengeJti: claims.jti },
        p.otpKey,
        t,
      );
      await deps.sms.send(
        q,
        {
          tenantId: caller.tenantId,
          to: p.phone,
          code,
          purpose: 'stepup',
          text: `Your confirmation code is ${code}. It expires in 5 minutes.`,
        },
        t,
      );
    }
    await auditAuth(
      q,
      {
        tenantId: caller.tenantId,
        action: 'auth.stepup_otp_send',
        actor: { type: 'customer', id: caller.customerId },
        target: { type: 'session', id: caller.sessionId },
        allow: g.ok,
        attrs: { ip: clientIpOf(ctx), challenge: claims.jti },
        requestId: ctx.requestId,
      },
      t,
    );
    return g;
  });
  if (!gate.ok)
    throw new AppError('RATE_LIMITED', 'too many codes requested; try later', {
      headers: { 'retry-after': String(gate.reason === 'locked' ? gate.retryAfterS : 3600) },
    });
}

type Outcome = { kind: 'ok'; token: string } | { kind: 'fail'; err: AppError };

export async function completeStepUp(
  deps: IdentityDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  input: StepUpInput,
): Promise<{ accessToken: string; expiresIn: number; aal: 2; tokenType: 'Bearer' | 'DPoP' }> {
  const caller = await authenticate(deps, ctx);
  const claims: ChallengeClaims = await verifyChallenge(deps.keys.challenges, input.challengeToken, {
    tenantId: caller.tenantId,
    sub: caller.customerId,
  });
  const hasOtp = typeof input.otp === 'string';
  const hasDevice = input.deviceAssertion !== undefined && input.deviceAssertion !== null;
  if (hasOtp === hasDevice)
    throw new AppError('VALIDATION_FAILED', 'give exactly one of otp or deviceAssertion');
  const method: StepUpMethod = hasOtp ? 'otp' : 'device';
  if (!claims.methods.includes(method))
    throw new AppError('challenge_mismatch', `this challenge does not offer ${method}`);
  const { tenantId } = caller;
  const p = method === 'otp' ? await phoneOf(deps, caller) : undefined;
  const t = deps.now();
  const dvc = method === 'device' ? input.deviceAssertion?.deviceId : undefined;
  const access = await issueAccessToken(
    deps.keys,
    {
      tenantId,
      sub: caller.customerId,
      sid: caller.sessionId,
      aal: 2,
      amr: ['pin', method],
      orig: claims.orig,
      ...(dvc ? { dvc } : {}),
      // Issue 17 item 3: the AAL 2 token stays bound to the key the session proved.
      ...(caller.cnfJkt ? { cnf: { jkt: caller.cnfJkt } } : {}),
    },
    t,
  );
  const outcome = await deps.db.tx((q) =>
    stepUpInTx(q, { ctx, caller, claims, method, input, p, t, access }),
  );
  if (outcome.kind === 'fail') throw outcome.err;
  return {
    accessToken: outcome.token,
    expiresIn: accessTtlS,
    aal: 2,
    tokenType: caller.cnfJkt ? 'DPoP' : 'Bearer',
  };
}

/** One completion attempt, its challenge and factor verified up to step 4 outside the transaction. */
interface Attempt {
  ctx: RequestContext<unknown, unknown, unknown>;
  caller: Caller;
  claims: ChallengeClaims;
  method: StepUpMethod;
  input: StepUpInput;
  p: Awaited<ReturnType<typeof phoneOf>> | undefined;
  t: number;
  access: Awaited<ReturnType<typeof issueAccessToken>>;
}

type Note = (allow: boolean, outcome: string) => Promise<void>;

/** Steps 4 to 6 and the AAL 2 session, in one transaction; each refusal audited and returned. */
async function stepUpInTx(q: TxClient, a: Attempt): Promise<Outcome> {
  const { caller, claims, ctx, method, t, access } = a;
  const { tenantId } = caller;
  const note: Note = (allow, outcome) =>
    auditAuth(
      q,
      {
        tenantId,
        action: 'auth.stepup',
        actor: { type: 'customer', id: caller.customerId },
        target: { type: 'session', id: caller.sessionId },
        allow,
        aal: allow ? 2 : caller.aal,
        attrs: { ip: clientIpOf(ctx), method, outcome, challenge: claims.jti },
        requestId: ctx.requestId,
      },
      t,
    );
  const used = await q.query('SELECT 1 FROM used_challenges WHERE tenant_id = $1 AND jti = $2', [
    tenantId,
    claims.jti,
  ]);
  if (used.rows.length > 0) {
    await note(false, 'challenge_reused');
    return { kind: 'fail', err: new AppError('challenge_mismatch', 'challenge token was already used') };
  }
  const factor = await checkFactor(q, a, note);
  if (!factor.ok) return { kind: 'fail', err: factor.err };
  const { deviceUsableFrom } = factor;
  const hold = await pinResetHold(q, tenantId, caller.customerId, t);
  if (hold && !(deviceUsableFrom && deviceUsableFrom.getTime() <= hold.since.getTime())) {
    await note(false, 'pin_reset_hold');
    return { kind: 'fail', err: pinHeld(hold) };
  }
  const ins = await q.query(
    `INSERT INTO used_challenges (tenant_id, jti, used_at, expires_at) VALUES ($1, $2, to_timestamp($3 / 1000.0), to_timestamp($4))
     ON CONFLICT DO NOTHING RETURNING jti`,
    [tenantId, claims.jti, t, claims.exp],
  );
  // A concurrent completion won the race: this one consumed nothing else worth keeping.
  if (ins.rows.length === 0) throw new AppError('challenge_mismatch', 'challenge token was already used');
  const s = await q.query(
    `UPDATE sessions SET jti = $3, aal = 2, mfa_pending = false, last_seen = to_timestamp($4 / 1000.0)
     WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING id`,
    [tenantId, caller.sessionId, access.jti, t],
  );
  if (s.rows.length === 0) throw new AppError('session_revoked', 'session is revoked or unknown');
  await note(true, 'stepped_up');
  return { kind: 'ok', token: access.token };
}

/** Step 5: the OTP bound to the challenge (attempts counted) or the device signature. */
async function checkFactor(
  q: Queryable,
  a: Attempt,
  note: Note,
): Promise<{ ok: false; err: AppError } | { ok: true; deviceUsableFrom: Date | undefined }> {
  const { caller, claims, input, p, t } = a;
  const { tenantId } = caller;
  if (p) {
    const checks = [{ scope: 'otp' as const, key: p.key, policy: otpVerifyPolicy }];
    const gate = await admitAll(q, tenantId, checks, t);
    if (!gate.ok) {
      await note(false, 'locked');
      return {
        ok: false,
        err: new AppError('LOCKED', 'too many attempts; try later', {
          headers: { 'retry-after': String(gate.reason === 'locked' ? gate.retryAfterS : 3600) },
        }),
      };
    }
    if (
      !(await checkOtp(
        q,
        { tenantId, phoneKey: p.key, purpose: 'stepup', challengeJti: claims.jti },
        input.otp ?? '',
        p.otpKey,
        t,
      ))
    ) {
      await note(false, 'bad_otp');
      return { ok: false, err: new AppError('OTP_INVALID', 'the code is wrong, expired or already used') };
    }
    await settleSuccess(q, { tenantId, checks, at: t, epochs: gate.epochs }, t);
    return { ok: true, deviceUsableFrom: undefined };
  }
  const r = input.deviceAssertion
    ? await verifyDeviceAssertion(
        q,
        tenantId,
        caller.customerId,
        input.challengeToken,
        input.deviceAssertion,
        t,
      )
    : { ok: false as const, reason: 'invalid' as const };
  if (!r.ok) {
    await note(false, r.reason === 'cooling_off' ? 'device_cooling_off' : 'bad_device_assertion');
    return {
      ok: false,
      err:
        r.reason === 'cooling_off'
          ? coolingOff(r.usableFrom)
          : new AppError('DEVICE_ASSERTION_INVALID', 'device assertion is not valid for this challenge'),
    };
  }
  return { ok: true, deviceUsableFrom: r.usableFrom };
}
