/**
 * Machine credentials of a tenant's administration (issue 14 items 1 and 6), both opaque bearer
 * values shown once and stored as SHA-256 only; the edge looks them up by that hash and drops
 * them from its cache on NOTIFY when revoked or rotated:
 * - SCIM credentials (`scim_<random>`): what the identity provider's SCIM client presents at
 *   `/scim/v2`; the tenant of every SCIM request is the credential's.
 * - Service tokens (`svc_<random>`, table service_tokens): machines acting with roles; issued
 *   with an optional expiry, rotated with a grace period for the previous token, revoked.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { hashServiceToken, newServiceToken } from '../platform/service-tokens.ts';

export const scimTokenPrefix = 'scim_';

export function hashScimToken(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

export interface ScimCredentialView {
  id: string;
  name: string;
  created_by: string;
  created_at: string;
  revoked_at: string | null;
}
interface ScimRow {
  id: string;
  name: string;
  created_by: string;
  created_at: Date;
  revoked_at: Date | null;
}
const scimView = (r: ScimRow): ScimCredentialView => ({
  id: r.id,
  name: r.name,
  created_by: r.created_by,
  created_at: r.created_at.toISOString(),
  revoked_at: r.revoked_at?.toISOString() ?? null,
});

/** Issue a SCIM credential; the token is returned here only (caller's transaction). */
export async function issueScimCredential(
  q: Queryable,
  tenantId: string,
  name: string,
  actor: string,
  now: number,
): Promise<{ credential: ScimCredentialView; token: string }> {
  const token = `${scimTokenPrefix}${randomBytes(32).toString('base64url')}`;
  const { rows } = await q.query<ScimRow>(
    `INSERT INTO scim_credentials (id, tenant_id, name, token_hash, created_by, created_at) VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0))
     RETURNING id, name, created_by, created_at, revoked_at`,
    [uuidv7(now), tenantId, name, hashScimToken(token), actor, now],
  );
  return { credential: scimView(rows[0] as ScimRow), token };
}

export async function listScimCredentials(q: Queryable, tenantId: string): Promise<ScimCredentialView[]> {
  const { rows } = await q.query<ScimRow>(
    'SELECT id, name, created_by, created_at, revoked_at FROM scim_credentials WHERE tenant_id = $1 ORDER BY created_at, id',
    [tenantId],
  );
  return rows.map(scimView);
}

/** Revoke; the edge refuses the credential from its next request (NOTIFY scim_credentials_changed). */
export async function revokeScimCredential(
  q: Queryable,
  tenantId: string,
  id: string,
  actor: string,
  now: number,
): Promise<ScimCredentialView> {
  const { rows } = await q.query<ScimRow>(
    `UPDATE scim_credentials SET revoked_at = coalesce(revoked_at, to_timestamp($3 / 1000.0)), revoked_by = coalesce(revoked_by, $4)
     WHERE tenant_id = $1 AND id = $2 RETURNING id, name, created_by, created_at, revoked_at`,
    [tenantId, id, now, actor],
  );
  if (!rows[0]) throw new AppError('NOT_FOUND', `no SCIM credential ${id}`);
  return scimView(rows[0]);
}

// --- service tokens ------------------------------------------------------------------------

/** Roles a machine may hold: never a person's investigative roles, never SCIM's. */
export const serviceTokenRoles = ['admin', 'ops', 'readonly', 'ussd'] as const;
/**
 * After a rotation the previous token keeps working this long unless the caller says otherwise:
 * a day covers a deployment rolling the new token out across its instances (issue 14 item 6).
 */
export const defaultServiceTokenGraceS = 24 * 3600;
export const maxServiceTokenGraceS = 7 * 24 * 3600;

export interface ServiceTokenView {
  id: string;
  name: string;
  roles: string[];
  expires_at: string | null;
  created_by: string | null;
  created_at: string;
  rotated_at: string | null;
  previous_valid_until: string | null;
  revoked_at: string | null;
}
interface TokenRow {
  id: string;
  name: string;
  roles: string[];
  expires_at: Date | null;
  created_by: string | null;
  created_at: Date;
  rotated_at: Date | null;
  prev_valid_until: Date | null;
  revoked_at: Date | null;
}
const tokenColumns =
  'id, name, roles, expires_at, created_by, created_at, rotated_at, prev_valid_until, revoked_at';
const tokenView = (r: TokenRow): ServiceTokenView => ({
  id: r.id,
  name: r.name,
  roles: r.roles,
  expires_at: r.expires_at?.toISOString() ?? null,
  created_by: r.created_by,
  created_at: r.created_at.toISOString(),
  rotated_at: r.rotated_at?.toISOString() ?? null,
  previous_valid_until: r.prev_valid_until?.toISOString() ?? null,
  revoked_at: r.revoked_at?.toISOString() ?? null,
});

export async function issueServiceToken(
  q: Queryable,
  tenantId: string,
  t: { name: string; roles: readonly string[]; expiresAt: string | undefined },
  actor: string,
  now: number,
): Promise<{ serviceToken: ServiceTokenView; token: string }> {
  const token = newServiceToken();
  await q.query('SAVEPOINT service_token_issue');
  try {
    const { rows } = await q.query<TokenRow>(
      `INSERT INTO service_tokens (id, tenant_id, name, roles, token_hash, expires_at, created_by, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8 / 1000.0)) RETURNING ${tokenColumns}`,
      [uuidv7(now), tenantId, t.name, t.roles, hashServiceToken(token), t.expiresAt ?? null, actor, now],
    );
    await q.query('RELEASE SAVEPOINT service_token_issue');
    return { serviceToken: tokenView(rows[0] as TokenRow), token };
  } catch (err) {
    await q.query('ROLLBACK TO SAVEPOINT service_token_issue');
    if ((err as { code?: string }).code === '23505')
      throw new AppError('CONFLICT', `a service token named ${t.name} already exists`);
    throw err;
  }
}

export async function listServiceTokens(q: Queryable, tenantId: string): Promise<ServiceTokenView[]> {
  const { rows } = await q.query<TokenRow>(
    `SELECT ${tokenColumns} FROM service_tokens WHERE tenant_id = $1 ORDER BY created_at, id`,
    [tenantId],
  );
  return rows.map(tokenView);
}

const tokenNotFound = (id: string) => new AppError('NOT_FOUND', `no live service token ${id}`);

/** New token now; the previous one stays valid for `graceS` seconds (0: refused at once). */
export async function rotateServiceToken(
  q: Queryable,
  tenantId: string,
  id: string,
  graceS: number,
  now: number,
): Promise<{ serviceToken: ServiceTokenView; token: string }> {
  const token = newServiceToken();
  const { rows } = await q.query<TokenRow>(
    `UPDATE service_tokens SET prev_token_hash = token_hash, prev_valid_until = to_timestamp(($4 + $5 * 1000.0) / 1000.0),
       token_hash = $3, rotated_at = to_timestamp($4 / 1000.0)
     WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > to_timestamp($4 / 1000.0))
     RETURNING ${tokenColumns}`,
    [tenantId, id, hashServiceToken(token), now, graceS],
  );
  if (!rows[0]) throw tokenNotFound(id);
  return { serviceToken: tokenView(rows[0]), token };
}

/** Revoke the token and any previous one still in its grace period; edges refuse both at once. */
export async function revokeServiceToken(
  q: Queryable,
  tenantId: string,
  id: string,
  actor: string,
  now: number,
): Promise<ServiceTokenView> {
  const { rows } = await q.query<TokenRow>(
    `UPDATE service_tokens SET revoked_at = to_timestamp($3 / 1000.0), revoked_by = $4, prev_valid_until = NULL
     WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING ${tokenColumns}`,
    [tenantId, id, now, actor],
  );
  if (!rows[0]) throw tokenNotFound(id);
  return tokenView(rows[0]);
}
