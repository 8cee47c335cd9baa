/** Reading credentials from request headers. */
import { bearerToken } from '../../shared/bearer.ts';

export type CredentialCode =
  | 'UNAUTHENTICATED'
  | 'invalid_token'
  | 'session_revoked'
  | 'session_expired'
  | 'invalid_dpop_proof'
  | 'FORBIDDEN'
  // a removed device key (issue 13 item 1): tokens it stepped up, intents naming it
  | 'device_revoked'
  // API keys and signed requests (SPEC 5.4, 7.2)
  | 'missing_signature_headers'
  | 'invalid_key'
  | 'bad_secret'
  | 'bad_signature'
  | 'stale_date'
  | 'nonce_reused'
  | 'key_expired'
  | 'ip_not_allowed'
  | 'mtls_required';

export class CredentialError extends Error {
  /**
   * Who a refused credential verifiably named (its signature held, then a later check failed: a
   * revoked client, a missing certificate or proof): the refusal is audited in that tenant's
   * chain naming them, not as an anonymous caller under `_platform`.
   */
  verifiedAs: { tenantId: string; actor: { type: string; id: string } } | undefined;

  constructor(
    readonly status: 401 | 403,
    readonly code: CredentialCode,
    message: string,
    /** A challenge of its own (DPoP, RFC 9449 §7.1) instead of the scheme's default. */
    private readonly challenge?: string,
  ) {
    super(message);
  }

  /** RFC 6750 §3 challenge for 401 answers. */
  wwwAuthenticate(scheme = 'Bearer'): string {
    if (this.challenge) return this.challenge;
    if (scheme === 'Signature')
      return `Signature realm="payments", headers="x-api-key-id x-signature x-nonce date", error="${this.code}"`;
    const error =
      this.code === 'UNAUTHENTICATED'
        ? ''
        : `, error="invalid_token", error_description="${this.message.replaceAll('"', "'")}"`;
    return `${scheme} realm="payments"${error}`;
  }
}

/** The caller's token (see shared/bearer.ts); core clients may use the bare JWT form (SPEC 5.1). */
export function bearerOf(headers: Record<string, string>, allowBare = false): string | undefined {
  return bearerToken(headers.authorization, { bare: allowBare });
}
