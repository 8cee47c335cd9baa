/**
 * Lockout counters (SPEC 8): failures counted per tenant and scope key (phone, source address,
 * device; OTP verify and OTP send per phone), keys being HMACs, never raw values (SPEC 5.2).
 *
 * Guarantees:
 * - An attempt is counted when it is admitted, before the secret is checked ("pessimistic"
 *   counting), so N concurrent guesses can never exceed the threshold; a success then takes its
 *   own count back. Failures need no second write.
 * - At `threshold` counted attempts the key locks for `lockMs`, doubling with each further
 *   admitted attempt (progressive backoff), capped at `maxLockMs`.
 * - For the phone scope, `dayLimit` attempts within the window set `needs_otp`: no PIN attempt
 *   is admitted until an OTP verification clears it (SPEC 8 "daily failures").
 * - Counters of unknown phones behave exactly like those of known ones, so the answers match.
 * - A refused attempt is not counted anywhere.
 */
import type { Queryable } from '../db/pool.ts';

export type Scope = 'phone' | 'ip' | 'device' | 'otp' | 'otp_send';

export interface ThrottlePolicy {
  threshold: number;
  lockMs: number;
  maxLockMs: number;
  windowMs: number;
  /** Attempts in the window after which OTP re-verification is required (phone only). */
  dayLimit?: number;
}

const minuteMs = 60_000;
const dayMs = 24 * 60 * minuteMs;
/** SPEC 8: 15 minutes after 5 failures, progressive; 10 failures in a day → OTP. */
export const loginPolicy: ThrottlePolicy = { threshold: 5, lockMs: 15 * minuteMs, maxLockMs: dayMs, windowMs: dayMs };
export const phonePolicy: ThrottlePolicy = { ...loginPolicy, dayLimit: 10 };
/** OTP verify failures per phone over all codes: a new code does not reset them. */
export const otpVerifyPolicy: ThrottlePolicy = { threshold: 10, lockMs: 60 * minuteMs, maxLockMs: dayMs, windowMs: dayMs };
/** Enrolment (phone verification) codes a phone may be sent in a day: sign-up and PIN reset. */
export const enrolmentCodesPerDay = 5;
/**
 * Step-up codes a phone may be sent in a day (issue 13 item 2): every payment, payee and device
 * change asks for one, so the allowance is sized for daily use and counted apart from
 * enrolment codes (stepup.ts uses its own counter key) — a payee and three transfers by SMS
 * must not use up the day, and a day of payments must not block a PIN reset.
 */
export const stepUpCodesPerDay = 30;
/** SMS sends per phone (cost and pumping): the 5th send in a window locks sending for an hour. */
export const otpSendPolicy: ThrottlePolicy = { threshold: enrolmentCodesPerDay, lockMs: 60 * minuteMs, maxLockMs: dayMs, windowMs: dayMs };
/** Step-up SMS sends per phone: the 30th send in a window locks step-up sending for an hour. */
export const stepUpSendPolicy: ThrottlePolicy = { ...otpSendPolicy, threshold: stepUpCodesPerDay };

export interface Counter {
  fails: number;
  dayFails: number;
  windowStart: number;
  lockedUntil: number | undefined;
  needsOtp: boolean;
}

export type Admission =
  | { ok: true; next: Counter }
  | { ok: false; reason: 'verification_required' }
  | { ok: false; reason: 'locked'; retryAfterS: number };

/** Pure decision for one key: refuse, or count the attempt (and lock ahead when due). */
export function admit(row: Counter | undefined, now: number, policy: ThrottlePolicy): Admission {
  let c: Counter = row ?? { fails: 0, dayFails: 0, windowStart: now, lockedUntil: undefined, needsOtp: false };
  if (now - c.windowStart >= policy.windowMs) c = { ...c, fails: 0, dayFails: 0, windowStart: now };
  if (c.needsOtp) return { ok: false, reason: 'verification_required' };
  if (c.lockedUntil !== undefined && c.lockedUntil > now) {
    return { ok: false, reason: 'locked', retryAfterS: Math.ceil((c.lockedUntil - now) / 1000) };
  }
  const fails = c.fails + 1;
  const dayFails = c.dayFails + 1;
  const over = fails - policy.threshold;
  const lockedUntil = over >= 0 ? now + Math.min(policy.lockMs * 2 ** Math.min(over, 20), policy.maxLockMs) : c.lockedUntil;
  const needsOtp = policy.dayLimit !== undefined && dayFails >= policy.dayLimit;
  return { ok: true, next: { fails, dayFails, windowStart: c.windowStart, lockedUntil, needsOtp } };
}

/** Pure: take back a counted attempt that succeeded. `reset` (phone, otp): consecutive count to 0. */
export function succeeded(c: Counter, reset: boolean): Counter {
  return { ...c, fails: reset ? 0 : Math.max(0, c.fails - 1), dayFails: Math.max(0, c.dayFails - 1), lockedUntil: undefined, needsOtp: false };
}

export interface Check {
  scope: Scope;
  key: Buffer;
  policy: ThrottlePolicy;
}

interface Row {
  scope: Scope;
  key: Buffer;
  fails: number;
  day_fails: number;
  window_start: Date;
  locked_until: Date | null;
  needs_otp: boolean;
}

async function lockRows(q: Queryable, tenantId: string, checks: Check[], now: number): Promise<Map<string, Counter>> {
  const ordered = [...checks].sort((a, b) => (a.scope + a.key.toString('hex') < b.scope + b.key.toString('hex') ? -1 : 1));
  const out = new Map<string, Counter>();
  for (const c of ordered) {
    // One statement creates the row if missing and locks it either way (DO UPDATE locks): no
    // gap between create and lock in which housekeeping could delete it.
    const { rows } = await q.query<Row>(
      `INSERT INTO auth_throttle (tenant_id, scope, key, window_start) VALUES ($1, $2, $3, to_timestamp($4 / 1000.0))
       ON CONFLICT (tenant_id, scope, key) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
       RETURNING scope, key, fails, day_fails, window_start, locked_until, needs_otp`,
      [tenantId, c.scope, c.key, now],
    );
    const r = rows[0];
    if (r) {
      out.set(idOf(c), {
        fails: r.fails, dayFails: r.day_fails, windowStart: r.window_start.getTime(),
        lockedUntil: r.locked_until?.getTime(), needsOtp: r.needs_otp,
      });
    }
  }
  return out;
}

const idOf = (c: { scope: string; key: Buffer }) => `${c.scope}:${c.key.toString('hex')}`;

async function write(q: Queryable, tenantId: string, c: Check, v: Counter): Promise<void> {
  await q.query(
    `UPDATE auth_throttle SET fails = $4, day_fails = $5, window_start = to_timestamp($6 / 1000.0),
       locked_until = CASE WHEN $7::double precision IS NULL THEN NULL ELSE to_timestamp($7 / 1000.0) END, needs_otp = $8
     WHERE tenant_id = $1 AND scope = $2 AND key = $3`,
    [tenantId, c.scope, c.key, v.fails, v.dayFails, v.windowStart, v.lockedUntil ?? null, v.needsOtp],
  );
}

/**
 * Admit one attempt against every check, inside the caller's transaction: either every key
 * counts it, or none does and the first refusal is returned (OTP requirement before locks).
 */
export async function admitAll(q: Queryable, tenantId: string, checks: Check[], now: number): Promise<Admission & { retryAfterS?: number }> {
  const rows = await lockRows(q, tenantId, checks, now);
  const decisions = checks.map((c) => ({ c, d: admit(rows.get(idOf(c)), now, c.policy) }));
  const needsOtp = decisions.find((x) => !x.d.ok && x.d.reason === 'verification_required');
  if (needsOtp) return needsOtp.d;
  const locked = decisions.flatMap((x) => (!x.d.ok && x.d.reason === 'locked' ? [x.d.retryAfterS] : []));
  if (locked.length > 0) return { ok: false, reason: 'locked', retryAfterS: Math.max(...locked) };
  for (const { c, d } of decisions) if (d.ok) await write(q, tenantId, c, d.next);
  return { ok: true, next: { fails: 0, dayFails: 0, windowStart: now, lockedUntil: undefined, needsOtp: false } };
}

/** Take back the counted attempt of every check after a success (phone and otp reset to 0). */
export async function settleSuccess(q: Queryable, tenantId: string, checks: Check[], now: number): Promise<void> {
  const rows = await lockRows(q, tenantId, checks, now);
  for (const c of checks) {
    const row = rows.get(idOf(c));
    if (row) await write(q, tenantId, c, succeeded(row, c.scope === 'phone' || c.scope === 'otp'));
  }
}

/** A verified OTP proves the phone: clear the daily-failure requirement (SPEC 8). */
export async function clearOtpRequirement(q: Queryable, tenantId: string, phoneKey: Buffer): Promise<void> {
  await q.query(
    `UPDATE auth_throttle SET needs_otp = false, day_fails = 0 WHERE tenant_id = $1 AND scope = 'phone' AND key = $2`,
    [tenantId, phoneKey],
  );
}
