/**
 * Lockout counters (SPEC 8): failures counted per tenant and scope key (phone, device; OTP
 * verify and OTP send per phone), keys being HMACs, never raw values (SPEC 5.2). The source
 * address (scope 'ip') is a throttle sized for carrier NAT, not a lockout: address-throttle.ts.
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
 * - A refused attempt is not counted anywhere. Nor, in the end, is one the service failed before
 *   answering it (a database, pool, PIN queue, hash or record): judgedAttempt takes its count
 *   back (best effort: a database that failed the attempt may fail that too).
 * - A take-back (of a success's own count, or of an unanswered attempt) subtracts only from a count
 *   that was not reset since the attempt was counted: each count has an epoch, renewed by every
 *   reset (migration 1090), which the admission records and the take-back must match. A success,
 *   a window that ran out or an OTP verification in between would otherwise have the take-back
 *   subtract an attempt counted after the reset, one more guess for whoever made it.
 * - A success resets only what it can answer for: a lock or OTP requirement that attempts counted
 *   after its admission brought about without it (its own count taken back, `overtaken`) is not
 *   cleared. The success is then answered as the refusal it would meet now (VERIFICATION_REQUIRED:
 *   the right PIN leads to the OTP step; LOCKED), as if it had come after those attempts, and is
 *   counted nowhere. Cleared, the requirement would give whoever made those attempts one more guess
 *   (the count stays at the limit) and the customer a session the OTP step was to stand before.
 * - The source address (scope 'ip') is the exception: it counts failures only, after the
 *   secret was checked (settleFailure), never sign-ins in flight (issue 13 item 4: customers
 *   signing in together behind one NAT must not throttle each other).
 */
import type { Logger } from 'pino';
import { AppError } from '../../shared/errors.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { addressFailed, gateAddress, type AddressPolicy } from './address-throttle.ts';

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
export const loginPolicy: ThrottlePolicy = {
  threshold: 5,
  lockMs: 15 * minuteMs,
  maxLockMs: dayMs,
  windowMs: dayMs,
};
export const phonePolicy: ThrottlePolicy = { ...loginPolicy, dayLimit: 10 };
/** OTP verify failures per phone over all codes: a new code does not reset them. */
export const otpVerifyPolicy: ThrottlePolicy = {
  threshold: 10,
  lockMs: 60 * minuteMs,
  maxLockMs: dayMs,
  windowMs: dayMs,
};
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
export const otpSendPolicy: ThrottlePolicy = {
  threshold: enrolmentCodesPerDay,
  lockMs: 60 * minuteMs,
  maxLockMs: dayMs,
  windowMs: dayMs,
};
/** Step-up SMS sends per phone: the 30th send in a window locks step-up sending for an hour. */
export const stepUpSendPolicy: ThrottlePolicy = { ...otpSendPolicy, threshold: stepUpCodesPerDay };

export interface Counter {
  fails: number;
  dayFails: number;
  windowStart: number;
  lockedUntil: number | undefined;
  needsOtp: boolean;
  /** Address scope only: delays started in this and the window before (progression). */
  strikes: number;
  /**
   * The epochs of `fails` and `dayFails` (migration 1090), as read; undefined where this counter
   * resets that count (a new epoch is drawn when it is written).
   */
  failsEpoch: string | undefined;
  dayEpoch: string | undefined;
}

/** The epochs an admission counted its attempt in, per check. */
export interface Epochs {
  fails: string;
  day: string;
}

/** Whether the count an admission added is still in the counter's epochs (not reset since). */
export interface Within {
  fails: boolean;
  day: boolean;
}

/** `locked`: the phone, device or code is locked out; `throttled`: the address is slowed down. */
export type Admission =
  | { ok: true; next: Counter }
  | { ok: false; reason: 'verification_required' }
  | { ok: false; reason: 'locked' | 'throttled'; retryAfterS: number };

/** A key's counter before its first attempt: a window starting `now`. */
export const emptyCounter = (now: number): Counter => ({
  fails: 0,
  dayFails: 0,
  windowStart: now,
  lockedUntil: undefined,
  needsOtp: false,
  strikes: 0,
  failsEpoch: undefined,
  dayEpoch: undefined,
});

/** Pure decision for one key: refuse, or count the attempt (and lock ahead when due). */
export function admit(row: Counter | undefined, now: number, policy: ThrottlePolicy): Admission {
  let c = row ?? emptyCounter(now);
  if (now - c.windowStart >= policy.windowMs)
    c = { ...c, fails: 0, dayFails: 0, windowStart: now, failsEpoch: undefined, dayEpoch: undefined };
  if (c.needsOtp) return { ok: false, reason: 'verification_required' };
  if (c.lockedUntil !== undefined && c.lockedUntil > now) {
    return { ok: false, reason: 'locked', retryAfterS: Math.ceil((c.lockedUntil - now) / 1000) };
  }
  const fails = c.fails + 1;
  const dayFails = c.dayFails + 1;
  const lockedUntil = lockAhead(fails, now, policy) ?? c.lockedUntil;
  const needsOtp = policy.dayLimit !== undefined && dayFails >= policy.dayLimit;
  return { ok: true, next: { ...c, fails, dayFails, lockedUntil, needsOtp } };
}

/**
 * The end of the lock an attempt admitted at `now` as the `fails`th sets: none below the
 * threshold, `lockMs` at it, doubling with each further attempt (progressive), up to `maxLockMs`.
 */
function lockAhead(fails: number, now: number, policy: ThrottlePolicy): number | undefined {
  const over = fails - policy.threshold;
  return over >= 0 ? now + Math.min(policy.lockMs * 2 ** Math.min(over, 20), policy.maxLockMs) : undefined;
}

/**
 * Pure: take back a counted attempt that succeeded, from the counts it is still `within`.
 * `reset` (phone, otp): the consecutive count to 0, in a new epoch. For a success not `overtaken`
 * only: the lock and OTP requirement it clears are then its own count's (or ran out).
 */
export function succeeded(c: Counter, reset: boolean, within: Within): Counter {
  return {
    ...c,
    fails: reset ? 0 : within.fails ? Math.max(0, c.fails - 1) : c.fails,
    dayFails: within.day ? Math.max(0, c.dayFails - 1) : c.dayFails,
    lockedUntil: undefined,
    needsOtp: false,
    failsEpoch: reset ? undefined : c.failsEpoch,
  };
}

/**
 * Pure: take back a counted attempt, admitted at `admittedAt`, the caller was never answered on
 * (the service failed before the secret was judged, or after it was judged right): as if it had
 * not been admitted. The OTP requirement stays only where the remaining count still reaches it.
 * The lock goes where the remaining count no longer reaches the threshold, and where it is the
 * lock this attempt's own admission set: an attempt admitted past the threshold (once an earlier
 * lock ran out) locks ahead, and no attempt is admitted after it while that lock holds, so a lock
 * ending exactly where its admission put it is its own. Kept, an outage would lock out for 30
 * minutes and more a customer whose first lock had run out and who typed the right PIN.
 * Only from the counts the attempt is still `within`: a count reset since holds later attempts
 * only, and what they made (a lock, the OTP requirement) is left as it is.
 */
export function uncounted(c: Counter, policy: ThrottlePolicy, admittedAt: number, within: Within): Counter {
  const fails = within.fails ? Math.max(0, c.fails - 1) : c.fails;
  const dayFails = within.day ? Math.max(0, c.dayFails - 1) : c.dayFails;
  const own = c.lockedUntil !== undefined && c.lockedUntil === lockAhead(c.fails, admittedAt, policy);
  const keepLock = !within.fails || (fails >= policy.threshold && !own);
  const keepOtp = !within.day || (policy.dayLimit !== undefined && dayFails >= policy.dayLimit);
  return {
    ...c,
    fails,
    dayFails,
    lockedUntil: keepLock ? c.lockedUntil : undefined,
    needsOtp: c.needsOtp && keepOtp,
  };
}

/**
 * Pure: the refusal a right secret, admitted at `admittedAt` and judged at `now`, meets because of
 * attempts counted since its admission, if any: what an attempt would meet now were this one never
 * counted (`uncounted`). Its own count is no part of it (the tenth attempt of the day, the right
 * PIN, asks for no OTP); a lock or OTP requirement the others made without it is.
 */
export function overtaken(
  c: Counter,
  policy: ThrottlePolicy,
  admittedAt: number,
  within: Within,
  now: number,
): Refusal | undefined {
  const d = admit(uncounted(c, policy, admittedAt, within), now, policy);
  return d.ok ? undefined : d;
}

export interface Check {
  scope: Scope;
  key: Buffer;
  /** An AddressPolicy (scope 'ip') throttles; a ThrottlePolicy locks out. */
  policy: ThrottlePolicy | AddressPolicy;
}

const isAddress = (c: Check): c is Check & { policy: AddressPolicy } => 'failures' in c.policy;
/** A check that counts attempts on admission (every scope but the address). */
type Counted = Check & { policy: ThrottlePolicy };
const isCounted = (c: Check): c is Counted => !isAddress(c);

const decide = (c: Check, row: Counter | undefined, now: number): Admission =>
  'failures' in c.policy ? gateAddress(row, now) : admit(row, now, c.policy);

interface Row {
  scope: Scope;
  key: Buffer;
  fails: number;
  day_fails: number;
  window_start: Date;
  locked_until: Date | null;
  needs_otp: boolean;
  strikes: number;
  fails_epoch: string;
  day_epoch: string;
}

async function lockRows(
  q: Queryable,
  tenantId: string,
  checks: Check[],
  now: number,
): Promise<Map<string, Counter>> {
  const ordered = [...checks].sort((a, b) =>
    a.scope + a.key.toString('hex') < b.scope + b.key.toString('hex') ? -1 : 1,
  );
  const out = new Map<string, Counter>();
  for (const c of ordered) {
    // One statement creates the row if missing and locks it either way (DO UPDATE locks): no
    // gap between create and lock in which housekeeping could delete it.
    const { rows } = await q.query<Row>(
      `INSERT INTO auth_throttle (tenant_id, scope, key, window_start) VALUES ($1, $2, $3, to_timestamp($4 / 1000.0))
       ON CONFLICT (tenant_id, scope, key) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
       RETURNING scope, key, fails, day_fails, window_start, locked_until, needs_otp, strikes, fails_epoch, day_epoch`,
      [tenantId, c.scope, c.key, now],
    );
    const r = rows[0];
    if (r) {
      out.set(idOf(c), {
        fails: r.fails,
        dayFails: r.day_fails,
        windowStart: r.window_start.getTime(),
        lockedUntil: r.locked_until?.getTime(),
        needsOtp: r.needs_otp,
        strikes: r.strikes,
        failsEpoch: r.fails_epoch,
        dayEpoch: r.day_epoch,
      });
    }
  }
  return out;
}

const idOf = (c: { scope: string; key: Buffer }) => `${c.scope}:${c.key.toString('hex')}`;

/** Write `v` to the (locked) row of `c`: its counts' epochs as they are now. */
async function write(q: Queryable, tenantId: string, c: Check, v: Counter): Promise<Epochs> {
  const { rows } = await q.query<{ fails_epoch: string; day_epoch: string }>(
    `UPDATE auth_throttle SET fails = $4, day_fails = $5, window_start = to_timestamp($6 / 1000.0),
       locked_until = CASE WHEN $7::double precision IS NULL THEN NULL ELSE to_timestamp($7 / 1000.0) END, needs_otp = $8, strikes = $9,
       fails_epoch = COALESCE($10::bigint, nextval('auth_throttle_epoch')), day_epoch = COALESCE($11::bigint, nextval('auth_throttle_epoch'))
     WHERE tenant_id = $1 AND scope = $2 AND key = $3
     RETURNING fails_epoch, day_epoch`,
    [
      tenantId,
      c.scope,
      c.key,
      v.fails,
      v.dayFails,
      v.windowStart,
      v.lockedUntil ?? null,
      v.needsOtp,
      v.strikes,
      v.failsEpoch ?? null,
      v.dayEpoch ?? null,
    ],
  );
  const r = rows[0];
  // The row is locked (lockRows) by this transaction: it cannot have gone.
  if (!r) throw new Error('auth_throttle row vanished while locked');
  return { fails: r.fails_epoch, day: r.day_epoch };
}

/** Whether the count an admission added in `epochs` is still in `row`'s (none recorded: neither). */
const withinOf = (row: Counter, epochs: Epochs | undefined): Within => ({
  fails: epochs !== undefined && row.failsEpoch === epochs.fails,
  day: epochs !== undefined && row.dayEpoch === epochs.day,
});

/**
 * Admit one attempt against every check, inside the caller's transaction: either every key
 * counts it, or none does and one refusal is returned: the OTP requirement first, else the
 * longest wait (its reason; a lock before a throttle of the same length) with that Retry-After.
 * Admitted, the epochs each check counted the attempt in (by check), for its take-back.
 */
export async function admitAll(
  q: Queryable,
  tenantId: string,
  checks: Check[],
  now: number,
): Promise<Refusal | { ok: true; epochs: ReadonlyMap<string, Epochs> }> {
  const rows = await lockRows(q, tenantId, checks, now);
  const decisions = checks.map((c) => ({ c, d: decide(c, rows.get(idOf(c)), now) }));
  const refusal = firstRefusal(decisions.flatMap((x) => (x.d.ok ? [] : [x.d])));
  if (refusal) return refusal;
  const epochs = new Map<string, Epochs>();
  for (const { c, d } of decisions) if (d.ok) epochs.set(idOf(c), await write(q, tenantId, c, d.next));
  return { ok: true, epochs };
}

/** A refused admission. */
export type Refusal = Exclude<Admission, { ok: true }>;

/** The one refusal answered of several: the OTP requirement first, else the longest wait (a lock before a throttle). */
function firstRefusal(refusals: Refusal[]): Refusal | undefined {
  const needsOtp = refusals.find((r) => r.reason === 'verification_required');
  if (needsOtp) return needsOtp;
  const waits = refusals.flatMap((r) => (r.reason === 'verification_required' ? [] : [r]));
  return waits.sort((a, b) => b.retryAfterS - a.retryAfterS || (a.reason === 'locked' ? -1 : 1))[0];
}

/** The answer to a refused sign-in attempt (customer and agent login). */
export function refusalError(g: Refusal): AppError {
  if (g.reason === 'verification_required') {
    return new AppError(
      'VERIFICATION_REQUIRED',
      'too many failed attempts today: verify with a new code first',
    );
  }
  const headers = { 'retry-after': String(g.retryAfterS) };
  if (g.reason === 'throttled')
    return new AppError('ADDRESS_THROTTLED', 'too many failed sign-ins from this network; try again later', {
      headers,
    });
  return new AppError('LOCKED', 'too many failed attempts; try again later', { headers });
}

/**
 * Settle a right secret. Unless attempts counted since its admission have locked a check or made
 * it require an OTP without it (`overtaken`), it stands: the counted attempt of every check is
 * taken back from the counts not reset since its admission (phone and otp reset to 0; the address
 * counted nothing), and `{ ok: true }` is answered. Overtaken, it is taken back as if never
 * admitted (`uncounted`), what the others made stays, and the refusal it would meet now is
 * answered: the caller must answer that, never a session. An attempt admitted and settled in one
 * transaction (an OTP check) holds its rows locked throughout, so nothing can overtake it.
 * `now` is the time, or a clock read once the rows are locked: a secret judged before this
 * transaction (a sign-in) is judged against the counters as they are when it settles, so a lock
 * that overtook it is answered with the wait left then, not with the time since it was judged.
 */
export async function settleSuccess(
  q: Queryable,
  a: Admitted,
  now: number | (() => number),
): Promise<{ ok: true } | Refusal> {
  const clock = typeof now === 'number' ? () => now : now;
  const counted = a.checks.filter(isCounted);
  const rows = await lockRows(q, a.tenantId, counted, clock());
  const at = clock();
  const refusal = firstRefusal(
    counted.flatMap((c) => {
      const row = rows.get(idOf(c));
      const r = row && overtaken(row, c.policy, a.at, withinOf(row, a.epochs.get(idOf(c))), at);
      return r ? [r] : [];
    }),
  );
  if (refusal) {
    await takeBack(q, a, counted, rows);
    return refusal;
  }
  for (const c of counted) {
    const row = rows.get(idOf(c));
    const reset = c.scope === 'phone' || c.scope === 'otp';
    if (row) await write(q, a.tenantId, c, succeeded(row, reset, withinOf(row, a.epochs.get(idOf(c)))));
  }
  return { ok: true };
}

/** Count a failed attempt against the address checks (the other scopes counted it on admission). */
export async function settleFailure(
  q: Queryable,
  tenantId: string,
  checks: Check[],
  now: number,
): Promise<void> {
  const addresses = checks.filter(isAddress);
  const rows = await lockRows(q, tenantId, addresses, now);
  for (const c of addresses) {
    const next = addressFailed(rows.get(idOf(c)), now, c.policy);
    if (next) await write(q, tenantId, c, next);
  }
}

/** An attempt `admitAll` counted: where, against what, when (its `now`) and in which epochs (its answer's). */
export interface Admitted {
  tenantId: string;
  checks: Check[];
  at: number;
  epochs: ReadonlyMap<string, Epochs>;
}

/** Take back the attempt every non-address check counted on admission (see `uncounted`). */
export async function settleUnanswered(q: Queryable, a: Admitted, now: number): Promise<void> {
  const counted = a.checks.filter(isCounted);
  await takeBack(q, a, counted, await lockRows(q, a.tenantId, counted, now));
}

/** Write every counted check of `a` back as if it had never been admitted, from its locked `rows`. */
async function takeBack(
  q: Queryable,
  a: Admitted,
  counted: Counted[],
  rows: Map<string, Counter>,
): Promise<void> {
  for (const c of counted) {
    const row = rows.get(idOf(c));
    const within = row && withinOf(row, a.epochs.get(idOf(c)));
    // Reset in both counts since: nothing of this attempt is left to take back.
    if (row && within && (within.fails || within.day))
      await write(q, a.tenantId, c, uncounted(row, c.policy, a.at, within));
  }
}

/**
 * Judge an attempt `admitAll` has counted. `judge` calls `answered()` once the attempt is settled
 * (a wrong secret is counted for good as soon as it is judged wrong; a success once its counters
 * and record commit). When `judge` throws before that, the failure was the service's (a database
 * or pool that did not answer, the PIN queue full, a hash or a record that failed), not a wrong
 * guess: the attempt is taken back, so that no lockout comes of it. A caller answered an error
 * learns nothing about the secret. Taking it back is best effort: a database that failed the
 * attempt may fail this too (logged), and the original error is what the caller is answered.
 */
export async function judgedAttempt<T>(
  deps: { db: Pick<Db, 'tx'>; log: Logger; now: () => number },
  admitted: Admitted,
  judge: (answered: () => void) => Promise<T>,
): Promise<T> {
  let settled = false;
  try {
    return await judge(() => {
      settled = true;
    });
  } catch (err) {
    if (!settled) {
      await deps.db
        .tx((q) => settleUnanswered(q, admitted, deps.now()))
        .catch((e: unknown) =>
          deps.log.warn({ err: (e as Error).message }, 'an unanswered sign-in attempt stays counted'),
        );
    }
    throw err;
  }
}

/** A verified OTP proves the phone: clear the daily-failure requirement (SPEC 8), the day's count in a new epoch. */
export async function clearOtpRequirement(q: Queryable, tenantId: string, phoneKey: Buffer): Promise<void> {
  await q.query(
    `UPDATE auth_throttle SET needs_otp = false, day_fails = 0, day_epoch = nextval('auth_throttle_epoch')
     WHERE tenant_id = $1 AND scope = 'phone' AND key = $2`,
    [tenantId, phoneKey],
  );
}
