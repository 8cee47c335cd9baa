/**
 * A right PIN judged after attempts counted since its admission locked the phone (or device) or
 * made it need an OTP (core/identity/throttle.ts settleSuccess, `overtaken`): its success must not
 * clear what they made. Each race is played in order on the real table: the right PIN admitted,
 * the counter reset (the window running out, an OTP verification, another success), wrong PINs
 * admitted until the requirement or lock, then the right PIN settled. Cleared, the requirement
 * gave the wrong PINs' maker one more guess (the day's count stays at the limit) and the customer
 * a session the OTP step was to stand before; the right PIN is answered as if it came after them.
 * Where its own count is what completed the limit, the right PIN still stands and clears it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  type Admitted,
  admitAll,
  type Check,
  clearOtpRequirement,
  loginPolicy,
  phonePolicy,
  settleSuccess,
} from '../../core/identity/throttle.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const tenant = 'te';
const dayLimit = phonePolicy.dayLimit as number;

describe('a success overtaken by attempts counted after its admission', () => {
  let db: TestDb;
  before(async () => {
    db = await freshDatabase();
  });
  after(() => db.drop());

  const phone = (): Check => ({ scope: 'phone', key: randomBytes(16), policy: phonePolicy });
  const device = (): Check => ({ scope: 'device', key: randomBytes(16), policy: loginPolicy });
  /** Admit one attempt against `checks` at `at` (it must be admitted). */
  const admitted = async (checks: Check[], at: number): Promise<Admitted> => {
    const gate = await db.db.tx((q) => admitAll(q, tenant, checks, at));
    assert.ok(gate.ok, 'admitted');
    return { tenantId: tenant, checks, at, epochs: gate.epochs };
  };
  /** `n` wrong PINs against `checks` from `at` on, each once the lock before it ran out; the time of the last. */
  const wrong = async (checks: Check[], at: number, n: number): Promise<number> => {
    let t = at;
    for (let judged = 0; judged < n; ) {
      const gate = await db.db.tx((q) => admitAll(q, tenant, checks, t));
      if (gate.ok) judged++;
      else if (gate.reason === 'locked') t += gate.retryAfterS * 1000;
      else assert.fail(`wrong PIN ${judged + 1} refused: ${gate.reason}`);
    }
    return t;
  };
  const settle = (a: Admitted, at: number) => db.db.tx((q) => settleSuccess(q, a, at));
  const state = async (c: Check) => {
    const { rows } = await db.db.query<{
      fails: number;
      day_fails: number;
      needs_otp: boolean;
      locked_until: Date | null;
    }>(
      'SELECT fails, day_fails, needs_otp, locked_until FROM auth_throttle WHERE tenant_id = $1 AND key = $2',
      [tenant, c.key],
    );
    const r = rows[0];
    return (
      r && { fails: r.fails, day: r.day_fails, needsOtp: r.needs_otp, lockedUntil: r.locked_until?.getTime() }
    );
  };
  const next = (checks: Check[], at: number) => db.db.tx((q) => admitAll(q, tenant, checks, at));

  it("the window running out while it is judged: the new window's wrong PINs keep their OTP requirement", async () => {
    const p = phone();
    const t0 = Date.UTC(2026, 1, 2, 10);
    const a = await admitted([p], t0);
    const last = await wrong([p], t0 + phonePolicy.windowMs, dayLimit);
    assert.equal((await state(p))?.needsOtp, true, 'ten wrong PINs in the new window');
    const settled = await settle(a, last + 1);
    const s = await state(p);
    assert.deepEqual([s?.needsOtp, s?.day], [true, dayLimit], 'the requirement and the day count stay');
    assert.deepEqual(await next([p], last + 2), { ok: false, reason: 'verification_required' });
    assert.deepEqual(
      settled,
      { ok: false, reason: 'verification_required' },
      'the right PIN leads to the OTP step',
    );
  });

  it("an OTP verification while it is judged, then the day's limit of wrong PINs: the requirement stays", async () => {
    const p = phone();
    const t0 = Date.UTC(2026, 1, 3, 10);
    const a = await admitted([p], t0);
    await db.db.tx((q) => clearOtpRequirement(q, tenant, p.key));
    const last = await wrong([p], t0 + 1, dayLimit);
    const settled = await settle(a, last + 1);
    const s = await state(p);
    assert.deepEqual([s?.needsOtp, s?.day], [true, dayLimit], 'the requirement and the day count stay');
    assert.equal(s?.fails, dayLimit, 'its own consecutive count is taken back from the eleven');
    assert.deepEqual(settled, { ok: false, reason: 'verification_required' });
  });

  it('another success while it is judged, then five wrong PINs: their lock stays', async () => {
    const p = phone();
    const t0 = Date.UTC(2026, 1, 4, 10);
    const a = await admitted([p], t0);
    const other = await admitted([p], t0);
    await settle(other, t0);
    const last = await wrong([p], t0 + 1, loginPolicy.threshold);
    const lockedUntil = (await state(p))?.lockedUntil;
    assert.equal(lockedUntil, last + loginPolicy.lockMs, 'the fifth wrong PIN locks');
    const settled = await settle(a, last + 1000);
    const s = await state(p);
    assert.deepEqual(
      [s?.fails, s?.lockedUntil, s?.day],
      [loginPolicy.threshold, lockedUntil, loginPolicy.threshold],
      'the lock and the five failures stay; its own day count is taken back',
    );
    assert.deepEqual(settled, { ok: false, reason: 'locked', retryAfterS: loginPolicy.lockMs / 1000 - 1 });
  });

  it("a device locked by other phones' wrong PINs in the new window: refused, and its phone's count taken back", async () => {
    const p = phone();
    const d = device();
    const t0 = Date.UTC(2026, 1, 5, 10);
    const a = await admitted([p, d], t0);
    const later = t0 + phonePolicy.windowMs;
    const last = await wrong([d], later, loginPolicy.threshold);
    const settled = await settle(a, last + 1000);
    assert.equal((await state(d))?.lockedUntil, last + loginPolicy.lockMs, "the device's lock stays");
    assert.deepEqual((await state(p))?.fails, 0, "the right PIN's count on its phone is taken back");
    assert.deepEqual(settled, { ok: false, reason: 'locked', retryAfterS: loginPolicy.lockMs / 1000 - 1 });
  });

  it('its own count completed the limit (one window): it stands and clears the requirement', async () => {
    const p = phone();
    const t0 = Date.UTC(2026, 1, 6, 10);
    // Five wrong PINs, then a success once their lock ran out: the day counts five, the lock none.
    const lockEnd = (await wrong([p], t0, loginPolicy.threshold)) + loginPolicy.lockMs;
    assert.deepEqual(await settle(await admitted([p], lockEnd), lockEnd), { ok: true });
    const t1 = lockEnd + 1;
    const a = await admitted([p], t1);
    await wrong([p], t1 + 1, dayLimit - loginPolicy.threshold - 1);
    const before = await state(p);
    assert.deepEqual([before?.needsOtp, before?.day], [true, dayLimit], 'nine wrong PINs and the right one');
    assert.deepEqual(await settle(a, t1 + 2), { ok: true });
    const s = await state(p);
    assert.deepEqual([s?.needsOtp, s?.day, s?.fails, s?.lockedUntil], [false, dayLimit - 1, 0, undefined]);
    assert.ok((await next([p], t1 + 3)).ok, 'the next wrong PIN is admitted');
    assert.equal((await state(p))?.needsOtp, true, 'and, the tenth of the day, asks for an OTP');
  });

  it('its own count completed the lock (one window): it stands and the lock goes', async () => {
    const p = phone();
    const t0 = Date.UTC(2026, 1, 7, 10);
    const a = await admitted([p], t0);
    await wrong([p], t0 + 1, loginPolicy.threshold - 1);
    assert.ok((await state(p))?.lockedUntil, 'four wrong PINs and the right one in flight lock');
    assert.deepEqual(await settle(a, t0 + 2), { ok: true });
    const s = await state(p);
    assert.deepEqual([s?.fails, s?.lockedUntil, s?.day], [0, undefined, loginPolicy.threshold - 1]);
  });
});
