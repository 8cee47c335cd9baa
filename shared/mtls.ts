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
