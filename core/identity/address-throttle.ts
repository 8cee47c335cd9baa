/**
 * The per-address dimension of sign-in throttling (SPEC 8; issue 13 item 4). Mobile-money
 * customers mostly sit behind carrier NAT, so one address is many customers: the address is
 * a throttle sized for that (anchor: Auth0 throttles an address after 100 failures a day across
 * accounts), not a lockout. Guessing one account is stopped by the per-phone and per-device
 * lockouts (throttle.ts), which are unchanged.
 *
 * Guarantees:
 * - Counted per (tenant, address group): IPv4 per address, IPv6 per /64 (one subscriber's
 *   prefix: RFC 6177, 3GPP assigns a /64 per mobile connection, so rotating the low 64 bits does
 *   not give a fresh counter), IPv4-mapped IPv6 as the IPv4 it carries.
 * - Only failures count (addressFailed, after the secret was checked): a sign-in still being
 *   checked is not a failure, so customers signing in together behind one NAT cannot push the
 *   address over its threshold for each other. Admission (gateAddress) only refuses while a
 *   delay runs. Below `failures` failures in a window nothing from the address is refused: a
 *   right PIN for a phone that is not itself locked is never refused for other phones' failures.
 *   (Concurrent guesses across phones may pass the threshold by the number in flight; each
 *   phone's own lockout still counts pessimistically, so no phone gets more guesses.)
 * - The failure that reaches `failures` delays the address for `delayMs`; every further failure
 *   in that window doubles the delay (progressive), capped at `maxDelayMs`. Refusals while
 *   delayed answer 429 with Retry-After and are not counted.
 * - A window that reached the threshold hands its doubling on to the window right after it, so
 *   pacing at the threshold keeps getting slower; a full window without a delay forgives it.
 * - A success takes its own counted attempt back; when that brings the window below the
 *   threshold, the delay its counting started is lifted again.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { lookupKey, type TenantSecrets } from './secrets.ts';
import { type Admission, type Check, type Counter, emptyCounter } from './throttle.ts';

export interface AddressPolicy {
  /** Counted failures (across phones) in one window at which the address is delayed. */
  failures: number;
  windowMs: number;
  /** First delay; doubles with every further admitted attempt past the threshold. */
  delayMs: number;
  maxDelayMs: number;
}

const minuteMs = 60_000;

/** Issue 13 item 4: at least 100 failures per 15 minutes per address before slowing it down. */
export const defaultAddressPolicy: AddressPolicy = Object.freeze({
  failures: 100,
  windowMs: 15 * minuteMs,
  delayMs: 60_000,
  maxDelayMs: 60 * minuteMs,
});

/** Eight 16-bit groups of a valid IPv6 text (with `::` and a dotted IPv4 tail expanded). */
function ipv6Groups(ip: string): number[] {
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(ip);
  const text = dotted
    ? `${ip.slice(0, dotted.index)}${((Number(dotted[1]) << 8) | Number(dotted[2])).toString(16)}:${((Number(dotted[3]) << 8) | Number(dotted[4])).toString(16)}`
    : ip;
  const [head = '', tail] = text.split('::');
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const h = parse(head);
  const t = tail === undefined ? [] : parse(tail);
  return [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t];
}

/**
 * The counting group of a client address: IPv4 as is, IPv6 as its /64, IPv4-mapped IPv6 as the
 * IPv4. Anything else (no edge in front, a test) is its own group.
 */
export function addressGroupOf(raw: string): string {
  const ip = raw.trim().toLowerCase().replace(/%.*$/, '');
  if (isIPv4(ip)) return ip;
  if (!isIPv6(ip)) return `other:${ip}`;
  const g = ipv6Groups(ip);
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    const [hi = 0, lo = 0] = g.slice(6);
    return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
  }
  return `${g
    .slice(0, 4)
    .map((x) => x.toString(16))
    .join(':')}::/64`;
}

/** Pure admission for one address counter: refuse while delayed, else admit without counting. */
export function gateAddress(row: Counter | undefined, now: number): Admission {
  const c = row ?? emptyCounter(now);
  if (c.lockedUntil !== undefined && c.lockedUntil > now) {
    return { ok: false, reason: 'throttled', retryAfterS: Math.ceil((c.lockedUntil - now) / 1000) };
  }
  return { ok: true, next: c };
}

/** Pure: count one failed attempt (the counter after it); a failure while delayed changes nothing. */
export function addressFailed(row: Counter | undefined, now: number, p: AddressPolicy): Counter | undefined {
  const d = admitAddress(row, now, p);
  return d.ok ? d.next : undefined;
}

/** Pure decision for one address counter: refuse while delayed, else count the attempt. */
export function admitAddress(row: Counter | undefined, now: number, p: AddressPolicy): Admission {
  let c = row ?? emptyCounter(now);
  if (c.lockedUntil !== undefined && c.lockedUntil > now) {
    return { ok: false, reason: 'throttled', retryAfterS: Math.ceil((c.lockedUntil - now) / 1000) };
  }
  if (now - c.windowStart >= p.windowMs) {
    const quietSince = Math.max(c.windowStart + p.windowMs, c.lockedUntil ?? 0);
    const keep = c.fails >= p.failures && now - quietSince < p.windowMs;
    c = { ...c, fails: 0, windowStart: now, strikes: keep ? c.strikes : 0 };
  }
  const fails = c.fails + 1;
  if (fails < p.failures) return { ok: true, next: { ...c, fails } };
  const delayMs = Math.min(p.delayMs * 2 ** Math.min(c.strikes, 30), p.maxDelayMs);
  return { ok: true, next: { ...c, fails, lockedUntil: now + delayMs, strikes: c.strikes + 1 } };
}

/** The address check of a sign-in attempt: keyed by an HMAC of tenant and address group. */
export function addressCheck(s: TenantSecrets, tenantId: string, ip: string, policy: AddressPolicy): Check {
  return { scope: 'ip', key: lookupKey(s.lookup, 'ip', tenantId, addressGroupOf(ip)), policy };
}
