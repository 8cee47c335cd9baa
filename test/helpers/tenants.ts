/** Tenants the platform creates through the gateway, as its own Admins then act in them. */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { callRetrying } from './gateway.ts';

/** Create tenant `id` (Kenya, KES) with the platform Admin's token; a service token of its own Admin. */
export async function tenantWithAdmin(
  gw: string,
  platformAdmin: string,
  q: Queryable,
  id: string,
): Promise<string> {
  const made = await callRetrying(gw, 'POST', '/v1/tenants', {
    json: { id, name: `Tenant ${id}`, country: 'KE', baseCurrency: 'KES' },
    headers: {
      authorization: `Bearer ${platformAdmin}`,
      'x-request-id': randomUUID(),
      'idempotency-key': `k-${randomUUID()}`,
    },
  });
  assert.equal(made.status, 201, made.text);
  return putServiceToken(q, id, `${id}-admin`, ['admin']);
}
