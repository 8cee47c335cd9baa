import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { normalizedBody, origOf } from '../../shared/challenge.ts';
import { isWeakPin } from '../../core/identity/routes-phone.ts';
import { Semaphore, SemaphoreFull } from '../../core/identity/semaphore.ts';
import {
  admit,
  type Counter,
  emptyCounter,
  overtaken,
  phonePolicy,
  succeeded,
  uncounted,
} from '../../core/identity/throttle.ts';

/** An attempt whose counts were not reset since it was counted. */
const both = { fails: true, day: true };

describe('identity units', () => {
  it('semaphore: never more than `limit` at once, bounded queue refuses', async () => {
    const s = new Semaphore(2, 3);
    let running = 0;
    let peak = 0;
    const release: (() => void)[] = [];
    const task = () =>
      s.run(async () => {
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((r) => release.push(r));
        running--;
      });
    const all = [task(), task(), task(), task()];
    assert.equal(s.full, false, 'one waiter place left');
    all.push(task());
    assert.equal(s.full, true, 'two running, three waiting: the next is refused');
    await assert.rejects(task(), SemaphoreFull);
    while (release.length > 0 || s.stats.active > 0) {
      await new Promise((r) => setImmediate(r));
      release.shift()?.();
    }
    await Promise.all(all);
    assert.equal(peak, 2);
  });

  it('throttle: counts on admission, locks at 5 for 15 min doubling, success takes the count back', () => {
    let now = 0;
    let c = admit(undefined, now, phonePolicy);
    for (let i = 2; i <= 5; i++) {
      assert.ok(c.ok);
      c = admit(c.next, now, phonePolicy);
    }
    assert.ok(c.ok);
    assert.equal(c.next.fails, 5);
    assert.equal(c.next.lockedUntil, 15 * 60_000);
    const refused = admit(c.next, now, phonePolicy);
    assert.deepEqual(refused, { ok: false, reason: 'locked', retryAfterS: 900 });
    now = 15 * 60_000;
    const sixth = admit(c.next, now, phonePolicy);
    assert.ok(sixth.ok);
    assert.equal(sixth.next.lockedUntil, now + 30 * 60_000);
    const ok = succeeded(sixth.next, true, both);
    assert.equal(ok.fails, 0);
    assert.equal(ok.lockedUntil, undefined);
    assert.equal(ok.dayFails, 5, 'a success takes back only its own attempt from the daily count');
  });

  it('throttle: an unanswered attempt is taken back, the lock and OTP requirement only where it made them', () => {
    const now = 0;
    let c = admit(undefined, now, phonePolicy);
    for (let i = 2; i <= 5; i++) c = c.ok ? admit(c.next, now, phonePolicy) : c;
    assert.ok(c.ok);
    const fifth = c.next;
    assert.equal(fifth.lockedUntil, 15 * 60_000, 'the fifth counted attempt locks');
    const back = uncounted(fifth, phonePolicy, now, both);
    assert.deepEqual([back.fails, back.dayFails, back.lockedUntil], [4, 4, undefined]);
    // The sixth, admitted once the first lock ran out, locks 30 minutes ahead: taken back, that
    // lock is its own and goes (the first one had run out); the five failures stay counted.
    const later = 15 * 60_000;
    const sixth = admit(fifth, later, phonePolicy);
    assert.ok(sixth.ok);
    assert.equal(sixth.next.lockedUntil, later + 30 * 60_000);
    const sixthBack = uncounted(sixth.next, phonePolicy, later, both);
    assert.deepEqual([sixthBack.fails, sixthBack.lockedUntil], [5, undefined]);
    assert.ok(admit(sixthBack, later + 1, phonePolicy).ok, 'the next attempt is admitted');
    // A lock another attempt's admission set stays while the remaining count reaches the threshold.
    assert.equal(uncounted(sixth.next, phonePolicy, later - 1, both).lockedUntil, sixth.next.lockedUntil);
    // The tenth attempt of the day asks for an OTP; taken back, it no longer does.
    const tenth = { ...fifth, fails: 0, dayFails: 10, lockedUntil: undefined, needsOtp: true };
    assert.equal(uncounted(tenth, phonePolicy, now, both).needsOtp, false);
    assert.equal(uncounted({ ...tenth, dayFails: 11 }, phonePolicy, now, both).needsOtp, true);
    assert.equal(
      uncounted({ ...fifth, fails: 0, dayFails: 0 }, phonePolicy, now, both).fails,
      0,
      'never below zero',
    );
  });

  it('throttle: a take-back leaves a count reset since its admission, and what later attempts made there', () => {
    const now = 0;
    let c = admit(undefined, now, phonePolicy);
    for (let i = 2; i <= 5; i++) c = c.ok ? admit(c.next, now, phonePolicy) : c;
    assert.ok(c.ok);
    const fifth = { ...c.next, dayFails: 10, needsOtp: true };
    // The consecutive count was reset since (a success): only the day's is this attempt's.
    const dayOnly = uncounted(fifth, phonePolicy, now, { fails: false, day: true });
    assert.deepEqual(
      [dayOnly.fails, dayOnly.dayFails, dayOnly.lockedUntil, dayOnly.needsOtp],
      [5, 9, fifth.lockedUntil, false],
    );
    // The day's count was reset since (an OTP verification): its OTP requirement is a later attempt's.
    const failsOnly = uncounted(fifth, phonePolicy, now, { fails: true, day: false });
    assert.deepEqual(
      [failsOnly.fails, failsOnly.dayFails, failsOnly.lockedUntil, failsOnly.needsOtp],
      [4, 10, undefined, true],
    );
    const neither = { fails: false, day: false };
    assert.deepEqual(uncounted(fifth, phonePolicy, now, neither), fifth);
    // A success: the consecutive count reset in a new epoch either way; the day's only where its own.
    const s = succeeded({ ...fifth, failsEpoch: '7', dayEpoch: '8' }, true, neither);
    assert.deepEqual([s.fails, s.dayFails, s.failsEpoch, s.dayEpoch], [0, 10, undefined, '8']);
    const device = succeeded({ ...fifth, failsEpoch: '7', dayEpoch: '8' }, false, neither);
    assert.deepEqual([device.fails, device.dayFails, device.failsEpoch], [5, 10, '7']);
    // A window that ran out resets both counts, in new epochs.
    const renewed = admit(
      { ...fifth, failsEpoch: '7', dayEpoch: '8', needsOtp: false },
      phonePolicy.windowMs,
      phonePolicy,
    );
    assert.ok(renewed.ok);
    assert.deepEqual(
      [renewed.next.fails, renewed.next.failsEpoch, renewed.next.dayEpoch],
      [1, undefined, undefined],
    );
  });

  it('throttle: a success is overtaken only by what attempts counted since its admission made without it', () => {
    const c = (over: Partial<Counter>): Counter => ({ ...emptyCounter(0), ...over });
    // Its own count completed the day's limit (nine others and itself): it stands.
    assert.equal(
      overtaken(c({ fails: 0, dayFails: 10, needsOtp: true }), phonePolicy, 0, both, 1),
      undefined,
    );
    // Ten others without it, or the requirement made in a day count reset since: refused.
    const ten = c({ fails: 0, dayFails: 11, needsOtp: true });
    assert.deepEqual(overtaken(ten, phonePolicy, 0, both, 1), { ok: false, reason: 'verification_required' });
    const reset = c({ fails: 0, dayFails: 10, needsOtp: true });
    const dayReset = { fails: true, day: false };
    assert.deepEqual(overtaken(reset, phonePolicy, 0, dayReset, 1), {
      ok: false,
      reason: 'verification_required',
    });
    // A lock five others set without it holds; one its own count completed does not.
    const lock = 60_000 + phonePolicy.lockMs;
    const five = c({ fails: 6, dayFails: 6, lockedUntil: lock });
    assert.deepEqual(overtaken(five, phonePolicy, 0, both, 60_000), {
      ok: false,
      reason: 'locked',
      retryAfterS: 900,
    });
    assert.equal(
      overtaken(c({ fails: 5, dayFails: 5, lockedUntil: lock }), phonePolicy, 0, both, 60_000),
      undefined,
    );
  });

  it('orig: canonical JSON body, raw text otherwise, empty for none', () => {
    assert.equal(normalizedBody(''), '');
    assert.equal(normalizedBody('{ "b": 1, "a": [true, null] }'), '{"a":[true,null],"b":1}');
    assert.equal(normalizedBody('amount=5'), 'amount=5');
    assert.equal(
      origOf('post', '/v1/transfers', Buffer.from('{"b":1,"a":2}')),
      origOf('POST', '/v1/transfers', '{"a":2,"b":1}'),
    );
    assert.match(origOf('POST', '/v1/transfers', ''), /^[A-Za-z0-9_-]{43}$/);
  });

  it('weak PINs', () => {
    for (const p of ['1234', '0000', '987654', '8901']) assert.ok(isWeakPin(p), p);
    for (const p of ['482915', '1357', '2024']) assert.ok(!isWeakPin(p), p);
  });
});
