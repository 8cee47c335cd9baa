/**
 * OAuth 2.0 confidential clients for the core API (SPEC 5.1, 5.4.6; issue 17 item 1). A client
 * authenticates at /oauth2/token by one registered method: a shared secret (shown once, at
 * creation or rotation; only its SHA-256 is stored: a 256-bit random secret needs no slow KDF),
 * a JWT signed by one of its registered public keys (`private_key_jwt`, RFC 7523), or its TLS
 * client certificate (`tls_client_auth` by subject DN under a CA its tenant trusts,
 * `self_signed_tls_client_auth` by thumbprint; RFC 8705 §2).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Queryable } from '../../shared/db/pool.ts';

/** SPEC 5.1: `core:write` grants writes; `core:read` is this project's read-only scope. */
export const coreScopes = ['core:read', 'core:write'] as const;
export type CoreScope = (typeof coreScopes)[number];

export const authMethods = [
  'private_key_jwt',
  'tls_client_auth',
  'self_signed_tls_client_auth',
  'client_secret_basic',
  'client_secret_post',
] as const;
export type AuthMethod = (typeof authMethods)[number];
export const secretMethods: readonly AuthMethod[] = ['client_secret_basic', 'client_secret_post'];

export interface OAuthClient {
  tenantId: string;
  clientId: string;
  name: string;
  scopes: string[];
  method: AuthMethod;
  secretHash: Buffer | null;
  /** private_key_jwt: the client's public keys (a JWKS). */
  jwks: { keys: Record<string, unknown>[] } | null;
  /** tls_client_auth: the certificate subject DN (RFC 4514, e.g. `CN=payouts,O=Acme`). */
  tlsSubject: string | null;
  /** mTLS methods: the certificate's x5t#S256. */
  tlsThumbprint: string | null;
  createdAt: Date;
  revokedAt: Date | null;
}

export function hashSecret(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

/** Constant-time comparison of a presented secret with the stored hash. */
export function secretMatches(client: Pick<OAuthClient, 'secretHash'>, secret: string): boolean {
  return client.secretHash !== null && timingSafeEqual(hashSecret(secret), client.secretHash);
}

export const newClientId = (tenantId: string): string =>
  `cc_${tenantId}_${randomBytes(9).toString('base64url')}`;
export const newClientSecret = (): string => randomBytes(32).toString('base64url');

/** Create a secret client (or keep an existing one with the same id); returns the id and secret. Used by the demo seed. */
export async function createClient(
  q: Queryable,
  opts: { tenantId: string; scopes: CoreScope[]; name?: string; clientId?: string; secret?: string },
): Promise<{ clientId: string; clientSecret: string; scopes: string[] }> {
  const clientId = opts.clientId ?? newClientId(opts.tenantId);
  const clientSecret = opts.secret ?? newClientSecret();
  await q.query(
    `INSERT INTO oauth_clients (tenant_id, client_id, secret_hash, scopes, name) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (client_id) DO UPDATE SET secret_hash = EXCLUDED.secret_hash, scopes = EXCLUDED.scopes
     WHERE oauth_clients.tenant_id = EXCLUDED.tenant_id`,
    [opts.tenantId, clientId, hashSecret(clientSecret), opts.scopes, opts.name ?? ''],
  );
  return { clientId, clientSecret, scopes: [...opts.scopes] };
}

interface ClientRow {
  tenant_id: string;
  client_id: string;
  name: string;
  scopes: string[];
  token_endpoint_auth_method: AuthMethod;
  secret_hash: Buffer | null;
  jwks: { keys: Record<string, unknown>[] } | null;
  tls_subject: string | null;
  tls_thumbprint: string | null;
  created_at: Date;
  revoked_at: Date | null;
}

export const clientColumns =
  'tenant_id, client_id, name, scopes, token_endpoint_auth_method, secret_hash, jwks, tls_subject, tls_thumbprint, created_at, revoked_at';

export function clientOf(r: ClientRow): OAuthClient {
  return {
    tenantId: r.tenant_id,
    clientId: r.client_id,
    name: r.name,
    scopes: r.scopes,
    method: r.token_endpoint_auth_method,
    secretHash: r.secret_hash,
    jwks: r.jwks,
    tlsSubject: r.tls_subject,
    tlsThumbprint: r.tls_thumbprint,
    createdAt: r.created_at,
    revokedAt: r.revoked_at,
  };
}

/** An active (not revoked) client by id. */
export async function findClient(q: Queryable, clientId: string): Promise<OAuthClient | undefined> {
  const { rows } = await q.query<ClientRow>(
    `SELECT ${clientColumns} FROM oauth_clients WHERE client_id = $1 AND revoked_at IS NULL`,
    [clientId],
  );
  return rows[0] ? clientOf(rows[0]) : undefined;
}
