/**
 * Client certificates (RFC 8705) as Envoy forwards them: the CheckRequest's
 * `attributes.source.certificate` is the URL-encoded PEM of the certificate Envoy validated;
 * the edge passes the same text to core in `x-client-certificate` (an identity header, so a
 * client-sent copy never arrives). Tokens bound to a certificate carry `cnf.x5t#S256`, the
 * base64url SHA-256 of its DER encoding (RFC 8705 §3.1).
 */
import { X509Certificate, createHash } from 'node:crypto';

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
  return c ? createHash('sha256').update(c.raw).digest('base64url') : undefined;
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
