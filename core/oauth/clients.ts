/**
 * OAuth 2.0 confidential clients for the core API (SPEC 5.1). The secret is shown once, at
 * creation; only its SHA-256 is stored (a 256-bit random secret needs no slow KDF).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Queryable } from '../../shared/db/pool.ts';

/** SPEC 5.1: `core:write` grants writes; `core:read` is this project's read-only scope. */
export const coreScopes = ['core:read', 'core:write'] as const;
export type CoreScope = (typeof coreScopes)[number];

export function isCoreScope(s: string): s is CoreScope {
  return (coreScopes as readonly string[]).includes(s);
}

export interface OAuthClient {
  tenantId: string;
  clientId: string;
  scopes: string[];
  secretHash: Buffer;
}

export function hashSecret(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

/** Constant-time comparison of a presented secret with the stored hash. */
export function secretMatches(client: OAuthClient, secret: string): boolean {
  return timingSafeEqual(hashSecret(secret), client.secretHash);
}

/** Create a client (or keep an existing one with the same id); returns the id and secret. */
export async function createClient(
  q: Queryable,
  opts: { tenantId: string; scopes: CoreScope[]; name?: string; clientId?: string; secret?: string },
): Promise<{ clientId: string; clientSecret: string; scopes: string[] }> {
  const clientId = opts.clientId ?? `cc_${opts.tenantId}_${randomBytes(9).toString('base64url')}`;
  const clientSecret = opts.secret ?? randomBytes(32).toString('base64url');
  await q.query(
    `INSERT INTO oauth_clients (tenant_id, client_id, secret_hash, scopes, name) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (client_id) DO UPDATE SET secret_hash = EXCLUDED.secret_hash, scopes = EXCLUDED.scopes
     WHERE oauth_clients.tenant_id = EXCLUDED.tenant_id`,
    [opts.tenantId, clientId, hashSecret(clientSecret), opts.scopes, opts.name ?? ''],
  );
  return { clientId, clientSecret, scopes: [...opts.scopes] };
}

/** An active (not revoked) client by id. */
export async function findClient(q: Queryable, clientId: string): Promise<OAuthClient | undefined> {
  const { rows } = await q.query<{ tenant_id: string; client_id: string; scopes: string[]; secret_hash: Buffer }>(
    'SELECT tenant_id, client_id, scopes, secret_hash FROM oauth_clients WHERE client_id = $1 AND revoked_at IS NULL',
    [clientId],
  );
  const r = rows[0];
  return r ? { tenantId: r.tenant_id, clientId: r.client_id, scopes: r.scopes, secretHash: r.secret_hash } : undefined;
}
