/**
 * A tenant's security settings (SPEC 2.10; issue 20 item 1): every SPEC 2.10 field plus those the
 * security issue added (issue 13: `device_cooloff_hours`, `address_throttle`; issue 17:
 * `require_dpop_nonce`, `oauth_client_secrets_forbidden`, `mtls_trusted_cas`) and the `timezone` the policy's `hours` caveats read. GET shows every
 * field with its effective value (defaults filled in) and an ETag; PUT replaces the whole
 * document, needs If-Match (428 without, 412 when stale), is validated beyond its schema (CIDRs,
 * the throttle's own bounds, a known time zone) and audited with the fields it changed. The
 * UPDATE of `tenants` fires the `tenants_changed` NOTIFY (migration 0300), so every edge applies
 * the new settings from its next request (edge/state/store.ts).
 */
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import { defaultAddressPolicy } from '../../identity/address-throttle.ts';
import { TenantId } from '../../identity/schemas.ts';
import {
  AddressThrottle,
  addressThrottleProblems,
  defaultDeviceCooloffHours,
  defaultSessionTimeoutMinutes,
} from '../../identity/settings.ts';
import { insideRanges, readRange } from '../../../shared/ip-ranges.ts';
import { certificatesOf, validAt } from '../../../shared/mtls.ts';
import { adminRoute, checkIfMatch, etagOf, type AdminDeps, type Caller } from '../http.ts';
import { CountryCode } from '../schemas.ts';
import { managedTenant } from '../tenants/routes.ts';
import { declared } from '../../http/declared.ts';

const minute = 60_000;
const Throttle = Type.Object(
  {
    failures: Type.Integer({ minimum: 20, maximum: 100_000 }),
    window_minutes: Type.Integer({ minimum: 1, maximum: 6 * 60 }),
    delay_seconds: Type.Integer({ minimum: 1, maximum: 3600 }),
    max_delay_minutes: Type.Integer({ minimum: 1, maximum: 12 * 60 }),
  },
  { additionalProperties: false },
);

/** The whole document, every field present (PUT takes exactly this; GET shows it). */
export const SecuritySettings = Type.Object(
  {
    mfa_required_for_all_users: Type.Boolean(),
    session_timeout_minutes: Type.Integer({ minimum: 1, maximum: 30 * 24 * 60 }),
    allowed_ip_ranges: Type.Array(Type.String({ minLength: 3, maxLength: 49, pattern: '/' }), {
      maxItems: 100,
      uniqueItems: true,
    }),
    resident_regions: Type.Array(CountryCode, { maxItems: 50, uniqueItems: true }),
    require_dpop: Type.Boolean(),
    require_dpop_nonce: Type.Boolean(),
    require_mtls_for_m2m: Type.Boolean(),
    device_cooloff_hours: Type.Integer({ minimum: 0, maximum: 30 * 24 }),
    address_throttle: Throttle,
    timezone: Type.String({ minLength: 1, maxLength: 64 }),
    /** Issue 17 (core/oauth/tenant-policy.ts): no client_secret_basic/post clients. */
    oauth_client_secrets_forbidden: Type.Boolean(),
    /** Issue 17: PEM certificates of the CAs whose client certificates `tls_client_auth` accepts. */
    mtls_trusted_cas: Type.Array(Type.String({ minLength: 1, maxLength: 16384 }), { maxItems: 20 }),
  },
  { additionalProperties: false },
);
type Settings = Static<typeof SecuritySettings>;

/**
 * Each stored field checked on its own against the document's schema (a stored throttle may name
 * only some of its fields): one malformed field shows its default, not every field's.
 */
const fieldChecks = new Map(
  Object.entries({ ...SecuritySettings.properties, address_throttle: AddressThrottle }).map(([k, v]) => [
    k,
    TypeCompiler.Compile(v),
  ]),
);

function stored(security: unknown, name: 'address_throttle'): Static<typeof AddressThrottle> | undefined;
function stored<K extends keyof Settings>(security: unknown, name: K): Settings[K] | undefined;
function stored(security: unknown, name: string): unknown {
  const v =
    typeof security === 'object' && security !== null
      ? (security as Record<string, unknown>)[name]
      : undefined;
  return v !== undefined && fieldChecks.get(name)?.Check(v) === true ? v : undefined;
}

/**
 * What the audit record keeps of a changed setting: the value, except trusted CAs, named by the
 * SHA-256 fingerprint of each certificate (what tells one CA from another) instead of up to 20
 * PEM texts of 16 KiB in every record.
 */
function auditedValue(key: string, value: unknown): unknown {
  if (key !== 'mtls_trusted_cas' || !Array.isArray(value)) return value;
  return value.map((pem) => {
    const cert = typeof pem === 'string' ? certificatesOf([pem])[0] : undefined;
    return cert ? `sha256:${cert.fingerprint256}` : 'unreadable';
  });
}

/** The effective settings of a stored `security` value: what identity and the edge apply. */
export function settingsOf(security: unknown): Settings {
  const t: Static<typeof AddressThrottle> = stored(security, 'address_throttle') ?? {};
  const d = defaultAddressPolicy;
  return {
    mfa_required_for_all_users: stored(security, 'mfa_required_for_all_users') ?? false,
    session_timeout_minutes: stored(security, 'session_timeout_minutes') ?? defaultSessionTimeoutMinutes,
    allowed_ip_ranges: stored(security, 'allowed_ip_ranges') ?? [],
    resident_regions: stored(security, 'resident_regions') ?? [],
    require_dpop: stored(security, 'require_dpop') ?? false,
    require_dpop_nonce: stored(security, 'require_dpop_nonce') ?? false,
    require_mtls_for_m2m: stored(security, 'require_mtls_for_m2m') ?? false,
    device_cooloff_hours: stored(security, 'device_cooloff_hours') ?? defaultDeviceCooloffHours,
    address_throttle: {
      failures: t.failures ?? d.failures,
      window_minutes: t.window_minutes ?? d.windowMs / minute,
      delay_seconds: t.delay_seconds ?? d.delayMs / 1000,
      max_delay_minutes: t.max_delay_minutes ?? d.maxDelayMs / minute,
    },
    timezone: stored(security, 'timezone') ?? 'UTC',
    oauth_client_secrets_forbidden: stored(security, 'oauth_client_secrets_forbidden') ?? false,
    mtls_trusted_cas: stored(security, 'mtls_trusted_cas') ?? [],
  };
}

function knownZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-GB', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/**
 * One PEM certificate and nothing but blank space around it (LF or CRLF line ends). X509Certificate
 * reads the first certificate of a text and skips other PEM blocks before it, so anything more (a
 * second certificate, a key, another label it also reads) would be stored beside a CA that the
 * checks below, the audit's fingerprint and the rule (shared/mtls.ts) each read alone: a
 * certificate never checked, behind a valid CA or a kept one long expired. The body must be
 * exactly the certificate's DER, so no trailing bytes ride along either.
 */
const onePemCertificate =
  /^\s*-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=\r\n]+)-----END CERTIFICATE-----\s*$/;

function soleCertificate(pem: string, ca: X509Certificate): boolean {
  const body = onePemCertificate.exec(pem)?.[1];
  return body !== undefined && Buffer.from(body.replace(/\s/g, ''), 'base64').equals(ca.raw);
}

/**
 * A trusted CA that is not one, or a newly listed one not valid now: a CA outside its validity
 * vouches for no certificate (shared/mtls.ts checks it at every use), so listing one would refuse
 * every client certificate it issued while the settings looked as if they allowed them. A CA the
 * tenant already trusts (`kept`: the SHA-256 fingerprints of the stored list) stays acceptable after
 * it expires: an Admin changing any other setting puts back the list GET showed them, and removing
 * an expired CA is theirs to decide, not a precondition of every other change.
 */
function caProblems(pem: string, i: number, nowMs: number, kept: ReadonlySet<string>): string[] {
  let ca: X509Certificate;
  try {
    ca = new X509Certificate(pem);
  } catch {
    return [`mtls_trusted_cas[${i}]: not a PEM certificate`];
  }
  if (!soleCertificate(pem, ca))
    return [`mtls_trusted_cas[${i}]: not one PEM certificate (one CERTIFICATE block, nothing else)`];
  if (!ca.ca) return [`mtls_trusted_cas[${i}]: not a CA certificate`];
  if (validAt(ca, nowMs) || kept.has(ca.fingerprint256)) return [];
  return [`mtls_trusted_cas[${i}]: not valid now (valid from ${ca.validFrom} to ${ca.validTo})`];
}

/** The SHA-256 fingerprints of the CAs a tenant trusts now (what caProblems lets stay once expired). */
export function storedCaFingerprints(stored: readonly string[]): Set<string> {
  // certificatesOf skips a stored value that is no certificate: it vouches for nothing and is not kept either.
  return new Set(certificatesOf(stored).map((ca) => ca.fingerprint256));
}

/** Every problem the schema cannot express; [] when the document may be stored. */
export function securityProblems(
  s: Settings,
  caller: Caller,
  ownTenant: boolean,
  nowMs = Date.now(),
  keptCas: ReadonlySet<string> = new Set(),
): string[] {
  const problems = [...addressThrottleProblems(s.address_throttle)];
  const ranges = s.allowed_ip_ranges.map((r, i) => {
    // Stored as sent, so exactly what the policy reads (no spaces, no bare address).
    const c = readRange(r);
    if (!c) problems.push(`allowed_ip_ranges[${i}]: ${r} is not a CIDR (a.b.c.d/n or x::/n)`);
    return c;
  });
  if (s.require_dpop_nonce && !s.require_dpop) problems.push('require_dpop_nonce: needs require_dpop');
  s.mtls_trusted_cas.forEach((pem, i) => problems.push(...caProblems(pem, i, nowMs, keptCas)));
  if (!knownZone(s.timezone)) problems.push(`timezone: ${s.timezone} is not a known IANA time zone`);
  // An Admin cannot lock their own tenant out from where they stand (they would need the platform to
  // undo it), judged as core and the policy judge the ranges (shared/ip-ranges.ts: a range holds
  // addresses of its own notation's family only, so ::/0 holds no IPv4 caller and 10.0.0.0/8 no
  // ::ffff:10.x caller).
  if (
    ownTenant &&
    ranges.length > 0 &&
    problems.length === 0 &&
    isIP(caller.ip) !== 0 &&
    !insideRanges(s.allowed_ip_ranges, caller.ip)
  ) {
    problems.push(`allowed_ip_ranges: none contains your own address ${caller.ip}`);
  }
  return problems;
}

const Params = Type.Object({ tenantId: TenantId });

export function securityRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.tenants'];
  return [
    adminRoute(deps, {
      ...declared('GET', '/v1/tenants/{tenantId}/security'),
      operationId: 'getTenantSecurity',
      tags,
      mode: 'read',
      summary:
        "The tenant's security settings (SPEC 2.10), every field with its effective value; the ETag is what PUT's If-Match names",
      params: Params,
      responses: { 200: { description: 'The settings', schema: SecuritySettings } },
      read: async (ctx, caller) => {
        await managedTenant(deps.db, caller.tenantId, ctx.params.tenantId);
        const { rows } = await deps.db.query<{ security: unknown }>(
          'SELECT security FROM tenants WHERE id = $1',
          [ctx.params.tenantId],
        );
        return { status: 200, body: settingsOf(rows[0]?.security) };
      },
    }),
    adminRoute(deps, {
      ...declared('PUT', '/v1/tenants/{tenantId}/security'),
      operationId: 'putTenantSecurity',
      tags,
      mode: 'write',
      ifMatch: true,
      summary:
        'Replace the security settings (If-Match required); edges apply them from their next request (NOTIFY tenants_changed)',
      params: Params,
      body: SecuritySettings,
      responses: { 200: { description: 'The settings now in force', schema: SecuritySettings } },
      write: async (ctx, w) => {
        const t = await managedTenant(w.q, w.caller.tenantId, ctx.params.tenantId, true);
        const { rows } = await w.q.query<{ security: unknown }>(
          'SELECT security FROM tenants WHERE id = $1',
          [t.id],
        );
        const before = settingsOf(rows[0]?.security);
        checkIfMatch(ctx.headers, before);
        const problems = securityProblems(
          ctx.body,
          w.caller,
          t.id === w.caller.tenantId,
          Date.now(),
          storedCaFingerprints(before.mtls_trusted_cas),
        );
        if (problems.length > 0) throw new AppError('SECURITY_INVALID', problems.join('; '));
        // Kept whole: fields a newer release reads but this one does not know survive the write.
        const current = rows[0]?.security;
        const previous: Record<string, unknown> =
          typeof current === 'object' && current !== null ? { ...current } : {};
        const next: Record<string, unknown> = { ...previous, ...ctx.body };
        // GET shows an unrestricted tenant's resident_regions as []: the same [] put back keeps it
        // unrestricted (absent, migration 0900) instead of storing a list no cluster is in.
        if (ctx.body.resident_regions.length === 0 && previous['resident_regions'] === undefined)
          delete next['resident_regions'];
        await w.q.query('UPDATE tenants SET security = $2::jsonb, updated_at = now() WHERE id = $1', [
          t.id,
          JSON.stringify(next),
        ]);
        const changed = (Object.keys(ctx.body) as (keyof Settings)[]).filter(
          (k) => etagOf(before[k]) !== etagOf(ctx.body[k]),
        );
        await w.audit(
          'tenant.security.put',
          { type: 'tenant', id: t.id },
          { changed, values: Object.fromEntries(changed.map((k) => [k, auditedValue(k, ctx.body[k])])) },
        );
        return { status: 200, headers: { etag: etagOf(ctx.body) }, body: ctx.body };
      },
    }),
  ];
}
