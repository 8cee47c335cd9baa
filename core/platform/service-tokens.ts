/**
 * Service tokens (SPEC 5.5): opaque bearer tokens `svc_<random>` for staff tooling and
 * service-to-service calls, carrying roles (Admin, Ops, ReadOnly). Only their SHA-256 is
 * stored; the edge looks them up by that hash.
 */
import { createHash, randomBytes } from 'node:crypto';
import { uuidv7 } from '../../shared/uuid.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import type { Seeder } from '../seed.ts';

export const serviceTokenPrefix = 'svc_';

export function newServiceToken(): string {
  return `${serviceTokenPrefix}${randomBytes(32).toString('base64url')}`;
}

export function hashServiceToken(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/** Create (or, with the same name, replace) a tenant's service token; returns the token once. */
export async function putServiceToken(
  q: Queryable,
  tenantId: string,
  name: string,
  roles: string[],
  token = newServiceToken(),
): Promise<string> {
  await q.query(
    `INSERT INTO service_tokens (id, tenant_id, name, roles, token_hash) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (tenant_id, name) DO UPDATE SET roles = EXCLUDED.roles, token_hash = EXCLUDED.token_hash, revoked_at = NULL`,
    [uuidv7(), tenantId, name, roles, hashServiceToken(token)],
  );
  return token;
}

/** Development service tokens for the demo tenant, kept stable across restarts via demo.json. */
export const serviceTokenSeeder: Seeder = async ({ db, tenantId, previous }) => {
  const before = (previous.serviceTokens ?? {}) as Record<string, unknown>;
  // ussd: the USSD gateway, a machine client of the ussd.gateway purpose (issue 9).
  const wanted: Record<string, string[]> = {
    admin: ['admin'],
    ops: ['ops'],
    readOnly: ['readonly'],
    ussd: ['ussd'],
  };
  const out: Record<string, { token: string; roles: string[] }> = {};
  for (const [name, roles] of Object.entries(wanted)) {
    const prev = (before[name] as { token?: unknown } | undefined)?.token;
    const token = typeof prev === 'string' && prev.startsWith(serviceTokenPrefix) ? prev : newServiceToken();
    await putServiceToken(db, tenantId, `dev-${name}`, roles, token);
    out[name] = { token, roles };
  }
  return { serviceTokens: out };
};
