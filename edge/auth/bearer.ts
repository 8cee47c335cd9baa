/** Reading credentials from request headers. */

export type CredentialCode =
  | 'UNAUTHENTICATED' | 'invalid_token' | 'session_revoked' | 'session_expired' | 'invalid_dpop_proof' | 'FORBIDDEN'
  // API keys and signed requests (SPEC 5.4, 7.2)
  | 'missing_signature_headers' | 'invalid_key' | 'bad_secret' | 'bad_signature' | 'stale_date' | 'nonce_reused'
  | 'key_expired' | 'ip_not_allowed' | 'mtls_required';

export class CredentialError extends Error {
  constructor(
    readonly status: 401 | 403,
    readonly code: CredentialCode,
    message: string,
  ) {
    super(message);
  }

  /** RFC 6750 §3 challenge for 401 answers. */
  wwwAuthenticate(scheme = 'Bearer'): string {
    if (scheme === 'Signature') return `Signature realm="payments", headers="x-api-key-id x-signature x-nonce date", error="${this.code}"`;
    const error = this.code === 'UNAUTHENTICATED' ? '' : `, error="invalid_token", error_description="${this.message.replaceAll('"', "'")}"`;
    return `${scheme} realm="payments"${error}`;
  }
}

/**
 * The token from `Authorization: Bearer <t>`, `Authorization: DPoP <t>`, or (core clients,
 * SPEC 5.1) the bare JWT form `Authorization: <t>`.
 */
export function bearerOf(headers: Record<string, string>, allowBare = false): string | undefined {
  const raw = headers.authorization?.trim();
  if (!raw) return undefined;
  const m = /^(Bearer|DPoP)\s+(\S+)$/i.exec(raw);
  if (m) return m[2];
  if (allowBare && /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(raw)) return raw;
  return undefined;
}
