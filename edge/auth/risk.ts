/**
 * The risk signal given to the policy (SPEC 2.6 context.risk). Documented rules, in order:
 *   high   — the request's device id differs from the device the session signed in with, or
 *            is missing (customers and agents alike): a token away from its device; or the subject started more than
 *            `velocityLimit` transfers (request-bound money intents) within `velocityWindowMs`;
 *   medium — the source address is outside the /16 (IPv4) or /48 (IPv6) the session began in;
 *   low    — otherwise, and for callers without a session.
 * Velocity is counted per edge instance (an approximation; the ledger's limits are exact).
 */
import { ipv6Groups } from '../../shared/ip-ranges.ts';
import type { SessionState } from '../state/store.ts';

export type Risk = 'low' | 'medium' | 'high';
export const velocityLimit = 10;
export const velocityWindowMs = 60_000;
const trackedSubjects = 100_000;

/**
 * Whether an IPv6 address carries an IPv4 address in its last 32 bits: IPv4-mapped
 * (`::ffff:0:0/96`, however written) or NAT64's well-known prefix (`64:ff9b::/96`, RFC 6052).
 * Either /96 lies inside one /48, so read as IPv6 every IPv4 caller would share the session's network.
 */
function carriesV4(g: number[]): boolean {
  const [a, b, c, d, e, f] = g;
  const mapped = a === 0 && b === 0 && f === 0xffff;
  const nat64 = a === 0x64 && b === 0xff9b && f === 0;
  return c === 0 && d === 0 && e === 0 && (mapped || nat64);
}

/**
 * The /16 or /48 an address is in. IPv6 is read by its groups (shared/ip-ranges.ts), not its
 * text: `2001:db8::5` and `2001:db8:0:1::5` share a /48 though their texts share no three groups.
 * An IPv4 address carried in IPv6 (carriesV4) is judged by its IPv4 /16.
 */
function prefixOf(ip: string): string {
  const v4 = /^(?:::ffff:)?(\d+)\.(\d+)\.\d+\.\d+$/.exec(ip);
  if (v4) return `${v4[1]}.${v4[2]}`;
  const groups = ipv6Groups(ip);
  if (!groups) return ip;
  const high = groups[6] ?? 0;
  return carriesV4(groups) ? `${high >> 8}.${high & 0xff}` : groups.slice(0, 3).join(':');
}

export class RiskEngine {
  private readonly recent = new Map<string, number[]>();

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * Count a money-moving request and tell whether the subject is over the velocity limit.
   * Only the newest `velocityLimit + 1` times are kept: the limit is exceeded exactly when all of
   * them fall inside the window, so a subject sending thousands of intents costs no more per
   * request (or in memory) than one sending eleven.
   */
  private velocity(subject: string): boolean {
    const now = this.now();
    const times = (this.recent.get(subject) ?? []).filter((t) => now - t < velocityWindowMs);
    times.push(now);
    if (times.length > velocityLimit + 1) times.splice(0, times.length - (velocityLimit + 1));
    this.recent.delete(subject);
    this.recent.set(subject, times);
    if (this.recent.size > trackedSubjects) this.recent.delete(this.recent.keys().next().value as string);
    return times.length > velocityLimit;
  }

  assess(opts: {
    session: SessionState | undefined;
    deviceId: string | undefined;
    ip: string;
    subject: string | undefined;
    moneyMoving: boolean;
  }): { risk: Risk; signals: string[] } {
    const signals: string[] = [];
    const s = opts.session;
    // A session bound to a device is used from that device: another id is a token away from its
    // device. The customer and agent apps send X-Device-Id on every call, so no id at all counts
    // too (issue 13 item 6): leaving the header out is no way around the check.
    if (s?.device && opts.deviceId && opts.deviceId !== s.device) signals.push('new_device');
    else if (s?.device && !opts.deviceId) signals.push('device_missing');
    if (opts.moneyMoving && opts.subject && this.velocity(opts.subject)) signals.push('velocity');
    if (signals.length > 0) return { risk: 'high', signals };
    if (s?.ip && opts.ip && prefixOf(s.ip) !== prefixOf(opts.ip))
      return { risk: 'medium', signals: ['ip_outside_usual_range'] };
    return { risk: 'low', signals };
  }
}
