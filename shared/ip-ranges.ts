/**
 * The one reading of IP addresses and CIDR ranges that the edge and core share: tenants'
 * allowed_ip_ranges (SPEC 2.10), API-key allowlists (SPEC 5.4), ip_ranges caveats (SPEC 2.7) and
 * the operator's PRIVATE_TARGETS_ALLOWED. It is the reading of the edge's policy: its
 * `net.cidr_contains`, which runs inside the compiled WASM bundle (OPA's wasm/src/cidr.c, not
 * Go's net package), so no check refuses a caller another one lets through:
 * - an address's family is its notation: a dotted quad is IPv4 (4 bytes), anything with a colon
 *   is IPv6 (16 bytes), and a range holds addresses of its own family only. An IPv4 caller is
 *   not inside `::/0` (node's BlockList finds it there: core and the edge's API-key allowlist
 *   used to let it through where the policy refused it);
 * - so an IPv4-mapped address (`::ffff:10.0.0.1`, what a dual-stack socket reports for an IPv4
 *   client) is an IPv6 address: inside `::/0` and `::ffff:10.0.0.0/104`, not inside
 *   `10.0.0.0/8`; and `127.0.0.1` is not inside `::ffff:127.0.0.0/104`. A tenant whose callers
 *   arrive in both forms lists both ranges;
 * - a range is exactly `address/prefix`: the policy reads a bare address, a leading space or a
 *   zone in the address as no range at all, so such a "range" holds nothing here. A prefix that
 *   is not all digits (`/8 `, `/8x`) it reads as whatever its WASM left in memory (inside and
 *   outside for the same caller, call after call): here it holds nothing, and no write path
 *   stores one (parseCidr and readRange refuse it, parseCidr's inputs are stored normalized).
 * test/shared/ip-ranges.test.ts checks every case against the committed policy bundle.
 * Nothing here throws on bad input: it is no address, no range, not inside.
 */
import { isIP } from 'node:net';

export type IpFamily = 'ipv4' | 'ipv6';

export interface Cidr {
  address: string;
  prefix: number;
  family: IpFamily;
}

/** The 32-bit number of a dotted IPv4 address (callers pass a valid one). */
export function ipv4Number(ip: string): number {
  return ip.split('.').reduce((n, part) => n * 256 + Number(part), 0);
}

/** The eight 16-bit groups of an IPv6 address (a dotted IPv4 tail allowed, a zone ignored); undefined if malformed. */
export function ipv6Groups(ip: string): number[] | undefined {
  let text = ip.toLowerCase().split('%')[0] ?? '';
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted?.[1]) {
    const n = ipv4Number(dotted[1]);
    text = `${text.slice(0, -dotted[1].length)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const part = (s: string | undefined) => (s ? s.split(':').map((g) => Number.parseInt(g, 16)) : []);
  const head = part(halves[0]);
  const tail = part(halves[1]);
  const groups =
    halves.length === 2
      ? [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail]
      : head;
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff)
    ? groups
    : undefined;
}

/**
 * `a.b.c.d/n` or `x:y::/n`, or a bare address as a /32 or /128, spaces around it ignored: how
 * inputs are read that are then stored as `address/prefix` (caveats, API-key allowlists,
 * PRIVATE_TARGETS_ALLOWED). undefined for anything else, a zone included (the policy's
 * net.cidr_contains never matches one).
 */
export function parseCidr(text: string): Cidr | undefined {
  const parts = text.trim().split('/');
  if (parts.length > 2) return undefined;
  const [address = '', bits] = parts;
  const v = address.includes('%') ? 0 : isIP(address);
  if (v === 0) return undefined;
  const max = v === 4 ? 32 : 128;
  const prefix = bits === undefined ? max : /^\d+$/.test(bits) ? Number(bits) : Number.NaN;
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) return undefined;
  return { address, prefix, family: v === 4 ? 'ipv4' : 'ipv6' };
}

/** A range exactly as the policy reads one (`address/prefix`, nothing around it); undefined otherwise. */
export function readRange(text: string): Cidr | undefined {
  return text.includes('/') && text.trim() === text ? parseCidr(text) : undefined;
}

/** `address/prefix`: how a parsed range is stored, so the policy reads what was meant. */
export const rangeText = (c: Cidr): string => `${c.address}/${c.prefix}`;

/** The bytes of an address as the policy reads it (4 for IPv4, 16 for IPv6); undefined when it is none. */
function bytesOf(ip: string): number[] | undefined {
  const v = ip.includes('%') ? 0 : isIP(ip);
  if (v === 4) return ip.split('.').map(Number);
  return v === 6 ? ipv6Groups(ip)?.flatMap((g) => [g >> 8, g & 0xff]) : undefined;
}

/** Whether the first `prefix` bits of `ip` are those of `net`; never across families. */
function within(net: number[], prefix: number, ip: number[]): boolean {
  if (net.length !== ip.length) return false;
  for (let i = 0, bits = prefix; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if (((net[i] ?? 0) & mask) !== ((ip[i] ?? 0) & mask)) return false;
  }
  return true;
}

/**
 * Whether a range has address bits set past its prefix (`10.0.0.1/8`): PostgreSQL's `cidr`
 * refuses it, and the writer most likely meant either the network (`10.0.0.0/8`) or the host
 * (`10.0.0.1/32`), so the API asks rather than guesses.
 */
export function hostBitsSet(c: Cidr): boolean {
  return (bytesOf(c.address) ?? []).some((b, i) => {
    const bits = c.prefix - i * 8;
    const mask = bits >= 8 ? 0xff : bits <= 0 ? 0 : (0xff << (8 - bits)) & 0xff;
    return (b & mask) !== b;
  });
}

/** Whether `ip` is inside one of `ranges` (each `address/prefix`); anything else holds nothing. */
export function insideRanges(ranges: readonly string[], ip: string): boolean {
  const caller = bytesOf(ip);
  if (!caller) return false;
  return ranges.some((r) => {
    const c = typeof r === 'string' ? readRange(r) : undefined;
    const net = c ? bytesOf(c.address) : undefined;
    return c !== undefined && net !== undefined && within(net, c.prefix, caller);
  });
}

/** Whether `ranges` is empty (no restriction) or `ip` is inside one; no address (undefined) is inside none. */
export function addressAllowed(ranges: readonly string[], ip: string | undefined): boolean {
  return ranges.length === 0 || (ip !== undefined && insideRanges(ranges, ip));
}

/**
 * What the policy is given for a list of ranges (a tenant's allowed_ip_ranges, a tuple's
 * ip_ranges caveat): each entry `readRange` reads as it stands, each other one replaced by
 * `unreadableRange`, which has no `/` and so is no range to the policy every time. The policy's
 * WASM `net.cidr_contains` reads a prefix that is not all digits (`10.0.0.0/8 `) as the prefix its
 * previous evaluation left in memory: such an entry let every caller in after another tenant's
 * request was checked against a /0, and the previous release stored such entries (its check
 * trimmed before reading, then kept the text). The list keeps its length: an empty list restricts
 * nothing. The same list is answered when every entry reads.
 */
export const unreadableRange = 'unreadable';

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Lists already read, with what the policy is given for each: the edge hands the policy the same
 * cached tenant and tuple lists on every Check, so each is read once, not on every decision. A
 * list is answered from memory only while it holds the same entries it was read with (comparing
 * them costs less than reading them): a list changed in place is read again, so an unreadable
 * entry put into a clean list never reaches the policy.
 */
const forPolicy = new WeakMap<unknown[], { seen: unknown[]; out: unknown[] }>();

const sameEntries = (a: readonly unknown[], b: readonly unknown[]): boolean =>
  a.length === b.length && a.every((v, i) => v === b[i]);

/**
 * The policy iterates an object's values as it iterates a list (`some cidr in ...`, `count`), so
 * an object in place of a list is read as the list of its values: an unreadable entry inside one
 * is no range either (the simulation endpoint takes any document).
 */
export function rangesForPolicy(list: unknown): unknown {
  if (isRecord(list)) return rangesForPolicy(Object.values(list));
  if (!Array.isArray(list)) return list;
  const known = forPolicy.get(list);
  if (known && sameEntries(known.seen, list)) return known.out;
  const out = list.every((r) => typeof r === 'string' && readRange(r))
    ? list
    : list.map((r) => (typeof r === 'string' && readRange(r) ? r : unreadableRange));
  forPolicy.set(list, { seen: [...list], out });
  return out;
}

/** A list of tuples with each `ip_ranges` caveat through `rangesForPolicy` (the same list when none changes). */
function tuplesForPolicy(list: unknown): unknown {
  // An object of tuples is iterated by the policy as the list of its values.
  if (isRecord(list)) return tuplesForPolicy(Object.values(list));
  if (!Array.isArray(list)) return list;
  let changed = false;
  const out = list.map((t: unknown) => {
    if (!isRecord(t) || !isRecord(t.caveat) || !('ip_ranges' in t.caveat)) return t;
    const ranges = rangesForPolicy(t.caveat.ip_ranges);
    if (ranges === t.caveat.ip_ranges) return t;
    changed = true;
    return { ...t, caveat: { ...t.caveat, ip_ranges: ranges } };
  });
  return changed ? out : list;
}

/**
 * A policy input document (SPEC 2.6) with every list of ranges it carries through
 * `rangesForPolicy`: the tenant's `security.allowed_ip_ranges` and the `ip_ranges` caveats of the
 * subject's and the tenant's tuples. Every evaluation goes through it (policy/runtime/bundle.ts):
 * the edge's decisions, core's delegated-payer check, simulation and replays alike, whatever was
 * stored or sent. The same document is answered when nothing changes.
 */
export function inputForPolicy(input: unknown): unknown {
  if (!isRecord(input)) return input;
  let out = input;
  const tenant = input.tenant;
  if (isRecord(tenant)) {
    const security = tenant.security;
    const ranges = isRecord(security) ? rangesForPolicy(security.allowed_ip_ranges) : undefined;
    const tuples = tuplesForPolicy(tenant.tuples);
    if ((isRecord(security) && ranges !== security.allowed_ip_ranges) || tuples !== tenant.tuples)
      out = {
        ...out,
        tenant: {
          ...tenant,
          ...(isRecord(security) && 'allowed_ip_ranges' in security
            ? { security: { ...security, allowed_ip_ranges: ranges } }
            : {}),
          ...('tuples' in tenant ? { tuples } : {}),
        },
      };
  }
  const subject = input.subject;
  if (isRecord(subject)) {
    const tuples = tuplesForPolicy(subject.tuples);
    if (tuples !== subject.tuples) out = { ...out, subject: { ...subject, tuples } };
  }
  return out;
}
