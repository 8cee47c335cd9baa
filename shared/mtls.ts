/**
 * Client certificates (RFC 8705) as Envoy forwards them: the CheckRequest's
 * `attributes.source.certificate` is the URL-encoded PEM of the certificate Envoy validated;
 * the edge passes the same text to core in `x-client-certificate` (an identity header, so a
 * client-sent copy never arrives). Tokens bound to a certificate carry `cnf.x5t#S256`, the
 * base64url SHA-256 of its DER encoding (RFC 8705 §3.1).
 */
import { X509Certificate, hash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';

/** Header carrying the verified client certificate from the edge to core (edge-set only). */
export const clientCertificateHeader = 'x-client-certificate';

/** The certificate from its URL-encoded PEM; undefined when it is not one. */
export function parseForwardedCertificate(encoded: string): X509Certificate | undefined {
  try {
    return new X509Certificate(decodeURIComponent(encoded));
  } catch {
    return undefined;
  }
}

/** `x5t#S256` of a certificate given as URL-encoded PEM (or a parsed one). */
export function certificateThumbprint(cert: string | X509Certificate): string | undefined {
  const c = typeof cert === 'string' ? parseForwardedCertificate(cert) : cert;
  return c ? hash('sha256', c.raw, 'base64url') : undefined;
}

/**
 * The subject distinguished name in RFC 4514 order and form (`CN=a,O=b`), the form
 * `tls_client_auth_subject_dn` is registered in (RFC 8705 §2.1.2). Node prints the subject one
 * attribute a line, most significant first.
 */
export function subjectDnOf(c: X509Certificate): string {
  return c.subject.split('\n').filter(Boolean).reverse().join(',');
}

/**
 * SPEC 2.10 `require_mtls_for_m2m` for an OAuth client token (the edge and core apply the same
 * rule): it counts only when bound to a certificate (`cnf.x5t#S256`, which the token endpoint
 * sets for such a tenant's clients) and presented on a connection with that very certificate
 * (`certificate`: the URL-encoded PEM Envoy verified). A token issued before the setting was
 * turned on is unbound, so it stops at once. Undefined when the token may be used; else why not.
 */
export function machineMtlsRefusal(
  boundTo: string | undefined,
  certificate: string | undefined,
): string | undefined {
  const required = 'this tenant requires mutual TLS for machine clients';
  if (boundTo === undefined) return `${required}: the token is not bound to a client certificate`;
  const presented = certificate ? certificateThumbprint(certificate) : undefined;
  if (presented !== boundTo) return `${required}: the token's client certificate was not presented`;
  return undefined;
}

/** Whether `c` is within its validity period at `nowMs`. */
export function validAt(c: X509Certificate, nowMs: number): boolean {
  return Date.parse(c.validFrom) <= nowMs && nowMs <= Date.parse(c.validTo);
}

/**
 * Whether one of `cas` (valid now) issued `cert`. The front door verifies a certificate against
 * every CA some tenant trusts (deploy/envoy/envoy.yaml `machine_mtls`), so only this says the
 * certificate is one this tenant trusts.
 */
export function issuedByTrustedCa(
  cas: readonly X509Certificate[],
  cert: X509Certificate,
  nowMs: number,
): boolean {
  return cas.some((ca) => validAt(ca, nowMs) && cert.checkIssued(ca) && cert.verify(ca.publicKey));
}

/**
 * Certificates already read, by their PEM text (null: unreadable). Core reads a tenant's settings
 * afresh on every client-token call and token request, so the rule's WeakMap below never holds
 * them there, and 20 CAs parsed each time cost milliseconds a call. A text reads the same every
 * time, so this can never answer for an old setting; bounded, the oldest text goes first.
 */
const pemsRead = new Map<string, X509Certificate | null>();
const maxPemsRead = 512;

function certificateOf(pem: string): X509Certificate | undefined {
  const known = pemsRead.get(pem);
  if (known !== undefined) return known ?? undefined;
  let cert: X509Certificate | null = null;
  try {
    cert = new X509Certificate(pem);
  } catch {
    // an unreadable entry trusts nothing
  }
  if (pemsRead.size >= maxPemsRead) pemsRead.delete(pemsRead.keys().next().value as string);
  pemsRead.set(pem, cert);
  return cert ?? undefined;
}

/** PEM certificates read; an unreadable entry trusts nothing. */
export function certificatesOf(pems: readonly string[]): X509Certificate[] {
  return pems.flatMap((pem) => {
    const cert = certificateOf(pem);
    return cert ? [cert] : [];
  });
}

/** What a tenant's SPEC 2.10 settings say about machine calls. */
export interface MachineMtlsRule {
  /** `require_mtls_for_m2m`: `true` only (as the edge and core have always read it). */
  required: boolean;
  /**
   * `mtls_trusted_cas`, read: undefined when the tenant lists none (any certificate the front
   * door verified will do); a listed entry that cannot be read trusts nothing, and a list that
   * is not one trusts no CA at all (fail closed).
   */
  trustedCas: readonly X509Certificate[] | undefined;
}

const MtlsSettings = Type.Object({
  require_mtls_for_m2m: Type.Optional(Type.Unknown()),
  mtls_trusted_cas: Type.Optional(Type.Unknown()),
});
const checkMtlsSettings = TypeCompiler.Compile(MtlsSettings);
const CaList = Type.Array(Type.String({ maxLength: 16384 }), { maxItems: 20 });
const checkCaList = TypeCompiler.Compile(CaList);

/** Rules already read, by the settings object (the edge's cached tenant keeps the same one until NOTIFY). */
const rulesRead = new WeakMap<object, MachineMtlsRule>();

/** The rule of a tenant's stored `security` JSON (SPEC 2.10); settings that are not an object require nothing. */
export function machineMtlsRule(security: unknown): MachineMtlsRule {
  if (!checkMtlsSettings.Check(security)) return { required: false, trustedCas: undefined };
  const known = rulesRead.get(security);
  if (known) return known;
  const cas = security.mtls_trusted_cas;
  const rule: MachineMtlsRule = {
    required: security.require_mtls_for_m2m === true,
    trustedCas:
      cas === undefined || (Array.isArray(cas) && cas.length === 0)
        ? undefined
        : checkCaList.Check(cas)
          ? certificatesOf(cas)
          : [],
  };
  rulesRead.set(security, rule);
  return rule;
}

/**
 * SPEC 2.10 `require_mtls_for_m2m` for every machine call (OAuth client tokens, API keys,
 * service tokens, SCIM credentials; DESIGN "People and machines"): when the tenant requires it,
 * the call came with a client certificate (`certificate`: the URL-encoded PEM Envoy verified)
 * that is valid now and, when the tenant lists `mtls_trusted_cas`, issued by one of them (the
 * front door accepts any CA some tenant trusts). The token endpoint, the edge and core apply this
 * one rule; OAuth tokens are also checked for their binding (machineMtlsRefusal). Undefined when
 * the call may go on; else why not (no certificate material in it).
 */
export function tenantMtlsRefusal(
  rule: MachineMtlsRule,
  certificate: string | X509Certificate | undefined,
  nowMs: number,
): string | undefined {
  if (!rule.required) return undefined;
  const required = 'this tenant requires mutual TLS for machine clients';
  const cert = typeof certificate === 'string' ? parseForwardedCertificate(certificate) : certificate;
  if (!cert) return `${required}: connect with a client certificate`;
  if (!validAt(cert, nowMs)) return `${required}: the client certificate is expired or not yet valid`;
  if (rule.trustedCas !== undefined && !issuedByTrustedCa(rule.trustedCas, cert, nowMs))
    return `${required}: the client certificate is not issued by a CA it trusts (mtls_trusted_cas)`;
  return undefined;
}

/**
 * An OAuth client token of a tenant that requires mutual TLS: the tenant's rule for every machine
 * call, then the token's binding to the very certificate presented (machineMtlsRefusal).
 */
export function clientTokenMtlsRefusal(
  rule: MachineMtlsRule,
  boundTo: string | undefined,
  certificate: string | undefined,
  nowMs: number,
): string | undefined {
  if (!rule.required) return undefined;
  return tenantMtlsRefusal(rule, certificate, nowMs) ?? machineMtlsRefusal(boundTo, certificate);
}
