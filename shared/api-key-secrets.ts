/**
 * API-key secrets at rest (SPEC 2.9): the edge must read a key's secret to check an HMAC
 * signature (SPEC 5.4.2), so secrets are sealed with a key of their own, which the edge holds and
 * which opens nothing else (not the token-signing keys, not other secrets). Core seals with it
 * when a key is created or rotated.
 */
import { open, seal } from './sealing.ts';

/** `api_keys.seal`: 1 = sealed with the master key (before this key existed), 2 = with this key. */
export const apiKeySealVersion = 2;

export class ApiKeySecrets {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error('API-key sealing key must be 32 bytes');
  }

  seal(keyId: string, secret: Buffer): Buffer {
    return seal(this.key, secret, `apikey:${keyId}`);
  }

  /** Throws if the sealed value was tampered with or sealed under another key or id. */
  open(keyId: string, sealed: Buffer): Buffer {
    return open(this.key, sealed, `apikey:${keyId}`);
  }
}
