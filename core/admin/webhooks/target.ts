/**
 * SSRF guard for webhook targets (issue 6 follow-up). A webhook URL must be http(s) and its host
 * must not be, or resolve to, a loopback, unspecified, link-local, private (RFC 1918, RFC 4193),
 * CGNAT (100.64/10), multicast, reserved or cloud metadata address. It is checked when an
 * endpoint is created or its URL changed, and again at every delivery (DNS can change): the
 * delivery's own connection resolves the name through `lookup` below, which refuses a bad
 * address, so the address checked is the address connected to (no check-then-resolve gap).
 * Redirects are never followed (undici's request does not follow them).
 *
 * `allowPrivateTargets` lets loopback, private, link-local and CGNAT targets through: tests
 * (receivers on 127.0.0.1) and the development stack only, never production. In production an
 * operator lists the internal receivers it means (`PRIVATE_TARGETS_ALLOWED`, CIDRs, e.g. an SMS
 * gateway): `allowedCidrs` lets exactly those through. Metadata addresses and names are refused
 * whatever either says.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { Agent } from 'undici';
import { insideRanges, ipv4Number, ipv6Groups, parseCidr, rangeText } from '../../../shared/ip-ranges.ts';

export type Refusal =
  | 'metadata'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'cgnat'
  | 'unspecified'
  | 'multicast'
  | 'reserved';

/** What `allowPrivateTargets` lets through; everything else in `Refusal` is always refused. */
const privateKinds: ReadonlySet<Refusal> = new Set(['loopback', 'private', 'link-local', 'cgnat']);

/** Cloud instance metadata services (AWS/GCP/Azure/OpenStack, ECS, Azure wire server, Alibaba). */
const metadataV4 = new Set(['169.254.169.254', '169.254.170.2', '168.63.129.16', '100.100.100.200']);
const metadataNames = new Set([
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'instance-data',
  'instance-data.ec2.internal',
]);

const v4Ranges: [number, number, Refusal][] = [
  [0x00000000, 8, 'unspecified'], // 0.0.0.0/8 "this network"
  [0x0a000000, 8, 'private'], // 10/8
  [0x64400000, 10, 'cgnat'], // 100.64/10
  [0x7f000000, 8, 'loopback'], // 127/8
  [0xa9fe0000, 16, 'link-local'], // 169.254/16
  [0xac100000, 12, 'private'], // 172.16/12
  [0xc0000000, 24, 'reserved'], // 192.0.0/24 IETF protocol assignments
  [0xc0000200, 24, 'reserved'], // 192.0.2/24 documentation
  [0xc0a80000, 16, 'private'], // 192.168/16
  [0xc6120000, 15, 'reserved'], // 198.18/15 benchmarking
  [0xc6336400, 24, 'reserved'], // 198.51.100/24 documentation
  [0xcb007100, 24, 'reserved'], // 203.0.113/24 documentation
  [0xe0000000, 4, 'multicast'], // 224/4
  [0xf0000000, 4, 'reserved'], // 240/4 and the broadcast address
];

function classifyV4(ip: string): Refusal | undefined {
  if (metadataV4.has(ip)) return 'metadata';
  const n = ipv4Number(ip);
  for (const [base, bits, kind] of v4Ranges) {
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    if ((n & mask) >>> 0 === base) return kind;
  }
  return undefined;
}

function classifyV6(ip: string): Refusal | undefined {
  const g = ipv6Groups(ip);
  if (!g) return 'reserved';
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = g;
  const v4Tail = `${g6 >> 8}.${g6 & 0xff}.${g7 >> 8}.${g7 & 0xff}`;
  const zeroHead = g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0 && g4 === 0;
  if (zeroHead && g5 === 0 && g6 === 0 && g7 === 0) return 'unspecified'; // ::
  if (zeroHead && g5 === 0 && g6 === 0 && g7 === 1) return 'loopback'; // ::1
  if (zeroHead && (g5 === 0xffff || g5 === 0)) return classifyV4(v4Tail); // ::ffff:a.b.c.d mapped, ::a.b.c.d compatible
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) return classifyV4(v4Tail); // NAT64 64:ff9b::/96
  if (
    g0 === 0xfd00 &&
    g1 === 0x0ec2 &&
    g2 === 0 &&
    g3 === 0 &&
    g4 === 0 &&
    g5 === 0 &&
    g6 === 0 &&
    g7 === 0x254
  )
    return 'metadata'; // AWS IMDS over IPv6
  if (
    g0 === 0xfd20 &&
    g1 === 0x00ce &&
    g2 === 0 &&
    g3 === 0 &&
    g4 === 0 &&
    g5 === 0 &&
    g6 === 0 &&
    g7 === 0x254
  )
    return 'metadata'; // GCP metadata server over IPv6
  if ((g0 & 0xfe00) === 0xfc00) return 'private'; // fc00::/7 unique local (RFC 4193)
  if ((g0 & 0xffc0) === 0xfe80) return 'link-local'; // fe80::/10
  if ((g0 & 0xffc0) === 0xfec0) return 'reserved'; // fec0::/10 site-local (deprecated)
  if ((g0 & 0xff00) === 0xff00) return 'multicast'; // ff00::/8
  if (g0 === 0x2001 && g1 === 0x0db8) return 'reserved'; // documentation
  if (g0 === 0x0100 && g1 === 0 && g2 === 0 && g3 === 0) return 'reserved'; // discard-only 100::/64
  return undefined;
}

/** Why this IP address may not be a webhook target, or undefined when it is a public address. */
export function classifyAddress(ip: string): Refusal | undefined {
  const family = isIP(ip);
  if (family === 4) return classifyV4(ip);
  if (family === 6) return classifyV6(ip);
  return 'reserved';
}

export class TargetRefused extends Error {
  constructor(
    readonly host: string,
    readonly reason: Refusal | 'scheme',
    detail: string,
  ) {
    super(detail);
  }
}

export interface TargetGuardOptions {
  /** Tests and the development stack only: let loopback, private, link-local and CGNAT targets through. */
  allowPrivateTargets?: boolean;
  /** Private addresses an operator lists as internal receivers (CIDR, IPv4 or IPv6). */
  allowedCidrs?: string[];
  /** Name resolution (tests may inject one); defaults to the system resolver. */
  lookup?: (host: string) => Promise<LookupAddress[]>;
  /** Give up resolving at create/PATCH time after this long (the name is checked again at delivery). */
  resolveTimeoutMs?: number;
}

const systemLookup = (host: string): Promise<LookupAddress[]> =>
  new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) =>
      err ? reject(err) : resolve(addresses),
    );
  });

export class TargetGuard {
  readonly allowPrivate: boolean;
  private readonly resolve: (host: string) => Promise<LookupAddress[]>;
  private readonly resolveTimeoutMs: number;
  private agent: Agent | undefined;
  /** The listed ranges as `address/prefix`, judged as every range is (shared/ip-ranges.ts). */
  private readonly allowed: string[];

  constructor(opts: TargetGuardOptions = {}) {
    this.allowPrivate = opts.allowPrivateTargets ?? false;
    this.allowed = (opts.allowedCidrs ?? []).map((cidr) => {
      const parsed = parseCidr(cidr);
      if (!parsed) throw new Error(`not a CIDR: ${cidr}`);
      return rangeText(parsed);
    });
    this.resolve = opts.lookup ?? systemLookup;
    this.resolveTimeoutMs = opts.resolveTimeoutMs ?? 2000;
  }

  /** undefined when the address may be a target under this guard; otherwise why not. */
  refusalOf(ip: string): Refusal | undefined {
    const kind = classifyAddress(ip);
    if (kind === undefined || kind === 'metadata') return kind;
    if (this.allowPrivate && privateKinds.has(kind)) return undefined;
    return insideRanges(this.allowed, ip) ? undefined : kind;
  }

  /** The URL's host without IPv6 brackets or a trailing dot, lower case. */
  static hostOf(url: URL): string {
    return url.hostname
      .replace(/^\[(.*)\]$/, '$1')
      .replace(/\.$/, '')
      .toLowerCase();
  }

  /** Refusal for the host itself (IP literal, localhost, metadata names) without resolving it. */
  private literalRefusal(host: string): Refusal | undefined {
    if (metadataNames.has(host)) return 'metadata';
    if (isIP(host)) return this.refusalOf(host);
    if (host === 'localhost' || host.endsWith('.localhost')) return this.refusalOf('127.0.0.1');
    return undefined;
  }

  /**
   * Create/PATCH-time check: throws TargetRefused when the URL is not http(s) or its host is or
   * resolves to a refused address. A name that does not resolve now is accepted (it cannot reach
   * anything now, and every delivery checks again).
   */
  async check(url: URL): Promise<void> {
    if (url.protocol !== 'https:' && url.protocol !== 'http:')
      throw new TargetRefused(url.hostname, 'scheme', 'url must be http(s)');
    const host = TargetGuard.hostOf(url);
    const literal = this.literalRefusal(host);
    if (literal) throw new TargetRefused(host, literal, `webhook host ${host} is a ${literal} address`);
    if (isIP(host)) return;
    let addresses: LookupAddress[];
    try {
      addresses = await Promise.race([
        this.resolve(host),
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('resolve timeout')), this.resolveTimeoutMs).unref(),
        ),
      ]);
    } catch {
      return;
    }
    for (const a of addresses) {
      const why = this.refusalOf(a.address);
      if (why)
        throw new TargetRefused(
          host,
          why,
          `webhook host ${host} resolves to a ${why} address (${a.address})`,
        );
    }
  }

  /** Delivery-time check of the URL alone (IP literals connect without a lookup). */
  deliveryRefusal(url: URL): string | undefined {
    if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'target refused: url must be http(s)';
    const host = TargetGuard.hostOf(url);
    const why = this.literalRefusal(host);
    return why ? `target refused: ${host} is a ${why} address` : undefined;
  }

  /** The resolver the delivery connection uses: every address of the name must pass the guard. */
  readonly lookup: LookupFunction = (hostname: string, options: LookupOptions, callback) => {
    this.resolve(hostname).then(
      (addresses) => {
        const usable =
          options.family === 4 || options.family === 6
            ? addresses.filter((a) => a.family === options.family)
            : addresses;
        for (const a of usable) {
          const why = this.refusalOf(a.address);
          if (why) {
            callback(
              Object.assign(
                new Error(`target refused: ${hostname} resolves to a ${why} address (${a.address})`),
                { code: 'EWEBHOOKTARGET' },
              ),
              '',
            );
            return;
          }
        }
        const first = usable[0];
        if (!first)
          callback(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }), '');
        else if (options.all) callback(null, usable);
        else callback(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, ''),
    );
  };

  /** The undici dispatcher deliveries go through (its connections resolve with `lookup`). */
  dispatcher(): Agent {
    this.agent ??= new Agent({ connect: { lookup: this.lookup } });
    return this.agent;
  }

  async close(): Promise<void> {
    const a = this.agent;
    this.agent = undefined;
    if (a) await a.close();
  }
}
