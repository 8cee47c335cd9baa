/**
 * Secrets shown once stay unreadable (issue 13 item 7): a stored response that carries a secret
 * (a webhook signing secret, an API-key secret, an OAuth or SCIM client secret, a token, and
 * whatever a later route issues under one of these names) is kept twice: sealed whole with the
 * master-key envelope (shared/sealing.ts, bound to its record) for the caller's replay, and
 * with every secret field redacted for the inspection routes. The decision is made here, from
 * the field names, for every idempotent frame: a new route gets it without opting in.
 */
import type { KeyStore } from '../keys/keys.ts';

export const redacted = '[redacted]';

/**
 * Secret-bearing field names, compared without case, `_` or `-`: these, and any name ending in
 * "secret" (clientSecret, webhook_secret, ...). Never `code`: error codes are not secrets.
 * Migration 0710 redacted the legacy rows with this list.
 */
const secretNames = new Set([
  'secret',
  'apikeysecret',
  'secretkey',
  'privatekey',
  'password',
  'pin',
  'otp',
  'token',
  'accesstoken',
  'refreshtoken',
  'verificationtoken',
  'challengetoken',
  'idtoken',
]);

export function isSecretField(name: string): boolean {
  const n = name.toLowerCase().replace(/[_-]/g, '');
  return secretNames.has(n) || n.endsWith('secret');
}

/**
 * A link carrying its secret as a URL parameter (a staff enrolment link's `path`,
 * core/staff/enrolment.ts: `#tenant=…&enrol=<token>`) is as secret as the token it repeats,
 * whatever the field is called: redacted too, or the inspection route shows the token.
 */
const secretInLink = /[#?&](?:enrol|token|access_token|refresh_token)=/i;

/** `value` with every secret field's value replaced; `found` says whether there was one. */
function redact(value: unknown): { value: unknown; found: boolean } {
  if (Array.isArray(value)) {
    let found = false;
    const out = value.map((v) => {
      const r = redact(v);
      found ||= r.found;
      return r.value;
    });
    return { value: out, found };
  }
  if (typeof value === 'string' && secretInLink.test(value)) return { value: redacted, found: true };
  if (typeof value !== 'object' || value === null) return { value, found: false };
  let found = false;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (isSecretField(k) && v !== null && v !== undefined) {
      out[k] = redacted;
      found = true;
    } else {
      const r = redact(v);
      found ||= r.found;
      out[k] = r.value;
    }
  }
  return { value: out, found };
}

/** What seals and opens stored responses: the master-key envelope of the key store. */
export type ResponseVault = Pick<KeyStore, 'sealSecret' | 'openSecret'>;

/** A record's identity, bound into its sealed response: a sealed body copied to another row does not open. */
export interface RecordId {
  tenantId: string;
  principal: string;
  key: string;
}

const aadOf = (r: RecordId) => `idempotency\n${r.tenantId}\n${r.principal}\n${r.key}`;

/** How a response is stored: `body` is what inspection may show; `sealed` the original, when it carried a secret. */
export interface StoredForm {
  body: string;
  sealed: Buffer | null;
}

/**
 * The stored form of a JSON response text. Without a vault a secret-bearing response is refused
 * (an error before commit, so the write rolls back) rather than stored in clear.
 */
export function storedForm(vault: ResponseVault | undefined, id: RecordId, json: string): StoredForm {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return { body: json, sealed: null };
  }
  const r = redact(parsed);
  if (!r.found) return { body: json, sealed: null };
  if (!vault) throw new Error('a response carrying a secret cannot be stored without the master key');
  return { body: JSON.stringify(r.value), sealed: vault.sealSecret(Buffer.from(json), aadOf(id)) };
}

/** The original response of a record: opened from `sealed` when it carried a secret. */
export function originalBody(
  vault: ResponseVault | undefined,
  id: RecordId,
  body: string,
  sealed: Buffer | null,
): string {
  if (sealed === null) return body;
  if (!vault) throw new Error('a sealed idempotent response cannot be opened without the master key');
  return vault.openSecret(sealed, aadOf(id)).toString();
}
