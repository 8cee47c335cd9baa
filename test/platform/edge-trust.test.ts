/**
 * Trust between the tiers (issue 23 item 4): core reads identity headers only from requests
 * carrying the edge shared secret, the current one or the previous one while it rotates; with
 * neither they identify nobody, and core cannot be built without a secret at all.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { buildCore, type CoreDeps } from '../../core/app.ts';
import { defineRoute } from '../../core/http/route.ts';
import { createHandler } from '../../core/http/server.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createDb } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { call, serve } from '../helpers/http.ts';

const current = randomBytes(32).toString('base64url');
const previous = randomBytes(32).toString('base64url');
const log = createLogger('silent');

const whoami = defineRoute({
  method: 'GET',
  path: '/v1/whoami',
  operationId: 'whoami',
  summary: 's',
  tags: ['t'],
  responses: { 200: { description: 'the identity core read' } },
  handler: async ({ identity }) => ({
    status: 200,
    body: {
      tenantId: identity.tenantId ?? null,
      principalId: identity.principalId ?? null,
      roles: identity.roles,
      clientIp: identity.clientIp ?? null,
      fromEdge: identity.fromEdge,
    },
  }),
});

const claimed = {
  'x-tenant-id': 'demo',
  'x-principal-id': 'staff-admin',
  'x-roles': 'admin',
  'x-client-ip': '198.51.100.7',
};
const nobody = { tenantId: null, principalId: null, roles: [], clientIp: null, fromEdge: false };
const edgeSaid = {
  tenantId: 'demo',
  principalId: 'staff-admin',
  roles: ['admin'],
  clientIp: '198.51.100.7',
  fromEdge: true,
};

describe('identity headers need the edge shared secret', () => {
  let origin: string;
  let close: () => Promise<void>;
  before(async () => {
    const s = await serve(
      createServer(
        createHandler({ routes: [whoami], log, metrics: createMetrics(), edgeSecrets: [current, previous] }),
      ),
    );
    origin = s.origin;
    close = s.close;
  });
  after(() => close());

  const whoAmI = async (headers: Record<string, string>) => {
    const r = await call(origin, 'GET', '/v1/whoami', { headers });
    assert.equal(r.status, 200, r.text);
    return r.json;
  };

  it('sent straight to core without the secret, they identify nobody', async () => {
    assert.deepEqual(await whoAmI(claimed), nobody);
    assert.deepEqual(await whoAmI({ ...claimed, 'x-edge-auth': '' }), nobody);
  });

  it('with a wrong secret, a prefix of the right one or the right one extended, they identify nobody', async () => {
    for (const wrong of [
      randomBytes(32).toString('base64url'),
      current.slice(0, 20),
      `${current}x`,
      `${current},${previous}`,
      current.toUpperCase(),
    ]) {
      assert.deepEqual(await whoAmI({ ...claimed, 'x-edge-auth': wrong }), nobody, wrong);
    }
  });

  it("with the current secret they are the edge's", async () => {
    assert.deepEqual(await whoAmI({ ...claimed, 'x-edge-auth': current }), edgeSaid);
  });

  it('with the previous secret they are still accepted, so the secret rotates without an outage', async () => {
    assert.deepEqual(await whoAmI({ ...claimed, 'x-edge-auth': previous }), edgeSaid);
  });
});

describe('core without an edge shared secret', () => {
  it('refuses to be built: there is no "no secret configured, so trust" mode', () => {
    for (const edgeSecrets of [[], [''], undefined]) {
      assert.throws(
        () =>
          createHandler({
            routes: [whoami],
            log,
            metrics: createMetrics(),
            edgeSecrets: edgeSecrets as string[],
          }),
        /EDGE_SHARED_SECRET/,
      );
    }
    const db = createDb({
      connectionString: 'postgres://unused@127.0.0.1:1/none',
      metrics: createMetrics(),
      log,
    });
    const deps = {
      db,
      log,
      metrics: createMetrics(),
      build: readBuildInfo(),
      keys: new KeyStore(db, randomBytes(32)),
    } as unknown as CoreDeps;
    assert.throws(() => buildCore(deps), /EDGE_SHARED_SECRET/);
    return db.close();
  });
});
