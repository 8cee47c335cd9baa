/** The tuples API as a tenant administrator calls it through the gateway (SPEC 2.7). */
import { randomUUID } from 'node:crypto';
import { call, type Res } from './http.ts';

/** `customer:<delegate> payer customer:<owner>`, with a caveat when given. */
export const payerTuple = (delegate: string, owner: string, caveat?: Record<string, unknown>) => ({
  subject: { ns: 'customer', id: delegate },
  relation: 'payer',
  object: { ns: 'customer', id: owner },
  ...(caveat ? { caveat } : {}),
});

/** Write (PUT) and delete (POST …:delete) a tuple of `tenantId` with `token`, each with a fresh Idempotency-Key. */
export function tupleAdmin(gw: string, token: () => string, tenantId = 'demo') {
  const base = `/v1/tenants/${tenantId}/tuples`;
  const send = (op: 'PUT' | 'POST', path: string, json: unknown): Promise<Res> =>
    call(gw, op, path, {
      json,
      headers: {
        authorization: `Bearer ${token()}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `tp-${randomUUID()}`,
      },
    });
  return {
    write: (json: unknown) => send('PUT', base, json),
    remove: (json: unknown) => send('POST', `${base}:delete`, json),
  };
}
