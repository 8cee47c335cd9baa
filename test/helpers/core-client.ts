/** A core OAuth client of a tenant and an access token for it, as a machine client gets one (SPEC 5.1). */
import assert from 'node:assert/strict';
import { createClient, type CoreScope } from '../../core/oauth/clients.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { call } from './http.ts';

/** A new client of `tenantId` with `scopes`, and the access token `origin`'s token endpoint grants it. */
export async function clientToken(
  db: Queryable,
  origin: string,
  tenantId: string,
  scopes: CoreScope[],
): Promise<string> {
  const client = await createClient(db, { tenantId, scopes });
  const r = await call(origin, 'POST', '/oauth2/token', {
    json: {
      grant_type: 'client_credentials',
      client_id: client.clientId,
      client_secret: client.clientSecret,
    },
  });
  assert.equal(r.status, 200, r.text);
  return r.json.access_token as string;
}
