/**
 * Issue 15 item 9: edge.warm() leaves nothing cold for the first Checks: the pool holds its
 * connections, and a request with a live service token of an existing tenant is decided from
 * memory, without a database round trip for the token or the tenant.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Db } from '../../shared/db/pool.ts';
import { KeyStore, deriveApiKeySealKey, deriveChallengeKey } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { seedDemo } from '../../core/seed.ts';
import { buildEdge, type Edge } from '../../edge/main.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { checkClient, envoyRequest } from '../helpers/edge.ts';

describe('edge warm-up', () => {
  let tdb: TestDb;
  let edge: Edge;
  let client: ReturnType<typeof checkClient>;
  let token: string;
  const queries: string[] = [];
  before(async () => {
    tdb = await freshDatabase();
    const masterKey = randomBytes(32);
    const demo = (await seedDemo(tdb.db, undefined, { keys: new KeyStore(tdb.db, masterKey) })) as {
      serviceTokens: { readOnly: { token: string } };
    };
    token = demo.serviceTokens.readOnly.token;
    // The edge's database, every query it sends recorded.
    const db: Db = {
      ...tdb.db,
      pool: tdb.db.pool,
      query: (sql, params) => (queries.push(sql), tdb.db.query(sql, params)),
    };
    edge = await buildEdge({
      db,
      apiKeySealKey: deriveApiKeySealKey(masterKey),
      challengeKeys: [deriveChallengeKey(masterKey)],
      log: createLogger('silent'),
      edgeSecret: 'warm-test',
    });
    await edge.warm();
    client = checkClient(`127.0.0.1:${await edge.listen(0)}`);
  });
  after(async () => {
    client.close();
    await edge.stop();
    await tdb.drop();
  });

  it('opened every pool connection and says it is warm', () => {
    assert.equal(edge.warmed, true);
    assert.equal(tdb.db.pool.totalCount, 10);
  });

  it('decides the first request with a service token from memory', async () => {
    queries.length = 0;
    const res = await client.check(
      envoyRequest('GET', '/v1/countries', { headers: { authorization: `Bearer ${token}` } }),
    );
    assert.equal(res.status.code, 0, JSON.stringify(res.denied_response));
    assert.deepEqual(
      queries.filter((q) => /service_tokens|FROM tenants/.test(q)),
      [],
    );
  });

  it('still reads the database for a token it did not load (the count above can fail)', async () => {
    queries.length = 0;
    await client.check(
      envoyRequest('GET', '/v1/countries', { headers: { authorization: 'Bearer svc_unknown-token' } }),
    );
    assert.equal(queries.filter((q) => /service_tokens/.test(q)).length, 1);
  });
});
