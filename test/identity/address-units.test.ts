import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  addressGroupOf,
  admitAddress,
  defaultAddressPolicy,
  type AddressPolicy,
} from '../../core/identity/address-throttle.ts';
import { addressThrottleProblems } from '../../core/identity/settings.ts';
import type { Admission, Counter } from '../../core/identity/throttle.ts';

const p: AddressPolicy = { failures: 4, windowMs: 60 * 60_000, delayMs: 60_000, maxDelayMs: 10 * 60_000 };

function admitted(a: Admission): Counter {
  assert.ok(a.ok, `refused: ${JSON.stringify(a)}`);
  return a.next;
}

/** `n` admitted attempts at `now`, starting from `c`. */
function attempts(c: Counter | undefined, n: number, now: number): Counter | undefined {
  let row = c;
  for (let i = 0; i < n; i++) row = admitted(admitAddress(row, now, p));
  return row;
}

describe('address throttle units', () => {
  it('groups IPv4 per address, IPv6 per /64, IPv4-mapped IPv6 as IPv4', () => {
    assert.equal(addressGroupOf('127.0.0.1'), '127.0.0.1');
    assert.equal(addressGroupOf('::ffff:127.0.0.1'), '127.0.0.1');
    assert.equal(addressGroupOf('::FFFF:7f00:1'), '127.0.0.1');
    assert.notEqual(addressGroupOf('10.0.0.1'), addressGroupOf('10.0.0.2'));
    const a = addressGroupOf('2001:db8:1:2:aaaa:bbbb:cccc:dddd');
    assert.equal(a, '2001:db8:1:2::/64');
    assert.equal(addressGroupOf('2001:0DB8:0001:0002::1'), a);
    assert.equal(
      addressGroupOf('2001:db8:1:2:ffff:ffff:1.2.3.4'),
      a,
      'a dotted tail is part of the low 64 bits',
    );
    assert.notEqual(addressGroupOf('2001:db8:1:3::1'), a);
    assert.equal(addressGroupOf('fe80::1%eth0'), 'fe80:0:0:0::/64');
    assert.equal(addressGroupOf('::1'), '0:0:0:0::/64');
    assert.equal(addressGroupOf('::'), '0:0:0:0::/64');
    assert.equal(addressGroupOf('not an address'), 'other:not an address');
  });

  it('nothing is refused below the threshold; the attempt reaching it starts the delay, each further one doubles it up to the cap', () => {
    let now = 0;
    const three = attempts(undefined, 3, now);
    assert.equal(three?.lockedUntil, undefined);
    let c = admitted(admitAddress(three, now, p));
    assert.equal(c.lockedUntil, 60_000, 'the 4th counted attempt delays the address for a minute');
    assert.deepEqual(admitAddress(c, now + 1000, p), { ok: false, reason: 'throttled', retryAfterS: 59 });
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      now = c.lockedUntil ?? now;
      c = admitted(admitAddress(c, now, p));
      delays.push(((c.lockedUntil ?? now) - now) / 60_000);
    }
    assert.deepEqual(delays, [2, 4, 8, 10, 10, 10], 'doubling, capped at max');
    // The window (an hour, from the first failure) ends: a new count, but the doubling goes on.
    now = c.windowStart + p.windowMs;
    const fresh = attempts(c, 3, now);
    assert.equal(fresh?.lockedUntil, c.lockedUntil, 'the new window admits up to the threshold again');
    assert.equal((admitted(admitAddress(fresh, now, p)).lockedUntil ?? 0) - now, p.maxDelayMs);
  });

  it('a window that reached the threshold passes its progression to the next one; a quiet window forgives it', () => {
    const start = 0;
    const hit = attempts(undefined, 4, start);
    assert.equal(hit?.strikes, 1);
    // The next window: three attempts pass, the 4th is delayed twice as long as the first time.
    const next = attempts(hit, 3, start + p.windowMs);
    const delayed = admitted(admitAddress(next, start + p.windowMs, p));
    assert.equal((delayed.lockedUntil ?? 0) - (start + p.windowMs), 2 * p.delayMs);
    // After a whole window without reaching the threshold, the first delay is the base again.
    const quiet = attempts(hit, 1, start + 2 * p.windowMs + p.delayMs);
    const again = attempts(quiet, 3, start + 2 * p.windowMs + p.delayMs);
    assert.equal(again?.strikes, 1);
    assert.equal((again?.lockedUntil ?? 0) - (start + 2 * p.windowMs + p.delayMs), p.delayMs);
  });

  it('tenant settings: defaults when absent, bounds and the cross-field rule when written', () => {
    assert.deepEqual(defaultAddressPolicy, {
      failures: 100,
      windowMs: 15 * 60_000,
      delayMs: 60_000,
      maxDelayMs: 60 * 60_000,
    });
    assert.deepEqual(addressThrottleProblems(undefined), []);
    assert.deepEqual(
      addressThrottleProblems({ failures: 200, window_minutes: 10, delay_seconds: 5, max_delay_minutes: 30 }),
      [],
    );
    assert.equal(addressThrottleProblems({ failures: 5 }).length, 1, 'a NAT-hostile threshold is refused');
    assert.equal(addressThrottleProblems({ failures: 100, extra: 1 }).length, 1);
    assert.equal(addressThrottleProblems({ window_minutes: 7 * 60 }).length, 1);
    assert.equal(addressThrottleProblems('100').length, 1);
    assert.deepEqual(addressThrottleProblems({ delay_seconds: 600, max_delay_minutes: 5 }), [
      'address_throttle.max_delay_minutes: shorter than delay_seconds',
    ]);
  });
});
