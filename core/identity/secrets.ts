/**
 * Per-tenant identity secret: 32 random bytes per tenant, sealed with the master key
 * (KeyStore.sealSecret) in `identity_tenant_secrets`. Sub-keys are derived with HKDF so one
 * stored secret serves distinct uses that never share a key:
 *   pin      argon2id `secret` input (a pepper: a stolen table alone cannot be brute-forced)
 *   lookup   HMAC of tenant + phone for counters, OTP rows and audit (SPEC 5.2: never the raw phone)
 *   otp      HMAC of OTP codes
 */
import { createHmac, hkdfSync, randomBytes } from 'node:crypto';
import type { Db } from '../../shared/db/pool.ts';
import type { KeyStore } from '../keys/keys.ts';

export interface TenantSecrets {
  pin: Buffer;
  lookup: Buffer;
  otp: Buffer;
}

function derive(secret: Buffer, tenantId: string, use: string): Buffer {
  return Buffer.from(
    hkdfSync('sha256', secret, Buffer.from(tenantId), Buffer.from(`payments-identity:${use}`), 32),
  );
}

/** Loads (creating on first use) and caches each tenant's identity secrets. */
export class SecretStore {
  private readonly cache = new Map<string, TenantSecrets>();

  constructor(
    private readonly db: Db,
    private readonly keys: KeyStore,
  ) {}

  /** The tenant's secrets, or undefined when the tenant does not exist. */
  async get(tenantId: string): Promise<TenantSecrets | undefined> {
    const hit = this.cache.get(tenantId);
    if (hit) return hit;
    const aad = `identity:${tenantId}`;
    const sealed = this.keys.sealSecret(randomBytes(32), aad);
    // Insert-if-absent, then read: concurrent first uses agree on one secret.
    const { rows } = await this.db.query<{ secret_enc: Buffer }>(
      `WITH t AS (SELECT id FROM tenants WHERE id = $1),
       ins AS (INSERT INTO identity_tenant_secrets (tenant_id, secret_enc) SELECT id, $2 FROM t ON CONFLICT (tenant_id) DO NOTHING RETURNING secret_enc)
       SELECT secret_enc FROM ins UNION ALL SELECT secret_enc FROM identity_tenant_secrets WHERE tenant_id = $1 LIMIT 1`,
      [tenantId, sealed],
    );
    // A concurrent first use may have inserted after this statement's snapshot: read again.
    const row =
      rows[0] ??
      (
        await this.db.query<{ secret_enc: Buffer }>(
          'SELECT secret_enc FROM identity_tenant_secrets WHERE tenant_id = $1',
          [tenantId],
        )
      ).rows[0];
    if (!row) return undefined;
    const secret = this.keys.openSecret(row.secret_enc, aad);
    const out = {
      pin: derive(secret, tenantId, 'pin'),
      lookup: derive(secret, tenantId, 'lookup'),
      otp: derive(secret, tenantId, 'otp'),
    };
    this.cache.set(tenantId, out);
    return out;
  }
}

/** HMAC-SHA256 of `parts` joined by '|' under `key`: the lookup key of a phone, IP or device. */
export function lookupKey(key: Buffer, ...parts: string[]): Buffer {
  return createHmac('sha256', key).update(parts.join('|')).digest();
}
