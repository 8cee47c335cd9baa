import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { KeyStore } from '../../core/keys/keys.ts';
import type { CoreDeps } from '../../core/app.ts';
import type { Db } from '../../shared/db/pool.ts';
import { after, before, describe, it } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { schemaHash } from '../../core/db/migrate.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { call } from '../helpers/http.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';

describe('platform routes', () => {
  let t: TestCore;
  before(async () => {
    t = await startTestCore();
  });
  after(() => t.close());

  it('GET /v1/health answers ok, a build id and uptime', async () => {
    const r = await call(t.origin, 'GET', '/v1/health', { headers: { 'x-request-id': 'req-abc.1' } });
    assert.equal(r.status, 200);
    assert.equal(r.json.status, 'ok');
    assert.match(r.json.build, /^\d+\.\d+\.\d+\+/);
    assert.ok(Number.isInteger(r.json.uptime_s) && r.json.uptime_s >= 0);
    assert.equal(r.headers['x-request-id'], 'req-abc.1');
  });

  it('mints a request id when the given one is missing or malformed', async () => {
    const r = await call(t.origin, 'GET', '/v1/health', {
      headers: { 'x-request-id': 'bad id with spaces' },
    });
    assert.match(r.headers['x-request-id'] ?? '', /^[0-9a-f-]{36}$/);
  });

  it('GET /v1/ready is 200 on a migrated database', async () => {
    const r = await call(t.origin, 'GET', '/v1/ready');
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { status: 'ready', checks: { database: 'ok' } });
  });

  it('GET /v1/version reports commit, version and the hash of the applied migrations', async () => {
    const r = await call(t.origin, 'GET', '/v1/version');
    assert.equal(r.status, 200);
    assert.match(r.json.version, /^\d+\.\d+\.\d+/);
    assert.match(r.json.commit, /^([0-9a-f]{40}|unknown)$/);
    assert.equal(r.json.schema_hash, await schemaHash(t.tdb.db));
  });

  it('GET /v1/metrics has the request and database histograms', async () => {
    await call(t.origin, 'GET', '/v1/ready');
    const r = await call(t.origin, 'GET', '/v1/metrics');
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'] ?? '', /text\/plain/);
    assert.match(
      r.text,
      /http_request_duration_seconds_bucket\{le="[^"]+",method="GET",route="\/v1\/ready",status="200"\}/,
    );
    assert.match(r.text, /db_query_duration_seconds_bucket\{le="[^"]+",op="select",outcome="ok"\}/);
  });

  it('GET /v1/openapi.json is a valid OpenAPI 3.1 document listing the routes', async () => {
    const r = await call(t.origin, 'GET', '/v1/openapi.json');
    assert.equal(r.status, 200);
    assert.equal(r.json.openapi, '3.1.0');
    const validator = new Validator();
    const result = await validator.validate(r.json);
    assert.deepEqual(result.errors ?? [], []);
    assert.equal(result.valid, true);
    for (const p of ['/v1/health', '/v1/ready', '/v1/metrics', '/v1/version', '/v1/docs'])
      assert.ok(r.json.paths[p], p);
    // Every route core serves is documented but the asset routes (hidden); the edge's table is checked against the same list in test/edge/routes.test.ts.
    const missing = t.core.routes
      .filter((route) => !route.hidden && !r.json.paths[route.path]?.[route.method.toLowerCase()])
      .map((route) => `${route.method} ${route.path}`);
    assert.deepEqual(missing, []);
  });

  it('GET /v1/docs serves the docs page and its assets from the project', async () => {
    const page = await call(t.origin, 'GET', '/v1/docs');
    assert.equal(page.status, 200);
    assert.match(page.text, /swagger-ui-bundle\.js/);
    assert.doesNotMatch(page.text, /https?:\/\//, 'no CDN: every asset is local');
    const js = await call(t.origin, 'GET', '/v1/docs/swagger-ui-bundle.js');
    assert.equal(js.status, 200);
    assert.ok(js.text.length > 100_000);
    const init = await call(t.origin, 'GET', '/v1/docs/init.js');
    assert.match(init.text, /\/v1\/openapi\.json/);
    const missing = await call(t.origin, 'GET', '/v1/docs/..%2Fpackage.json');
    assert.equal(missing.status, 404);
  });
});

/** Core alone on `db`, with `extra` deps, served on port 0. */
async function serveBareCore(db: Db, extra: Partial<CoreDeps> = {}) {
  const { buildCore } = await import('../../core/app.ts');
  const { createLogger } = await import('../../shared/log.ts');
  const { createMetrics } = await import('../../shared/metrics.ts');
  const { readBuildInfo } = await import('../../core/platform/build-info.ts');
  const { serve } = await import('../helpers/http.ts');
  return serve(
    buildCore({
      db,
      log: createLogger('silent'),
      metrics: createMetrics(),
      build: readBuildInfo(),
      keys: new KeyStore(db, randomBytes(32)),
      edgeSecrets: testEdgeSecrets,
      ...extra,
    }).server,
  );
}

describe('readiness with the edge in the same process (issue 15 item 9)', () => {
  it('is 503 until the edge is warm, then 200 saying so', async () => {
    const tdb = await (await import('../helpers/db.ts')).freshDatabase();
    let warm = false;
    const s = await serveBareCore(tdb.db, { edgeWarm: () => warm });
    try {
      const cold = await call(s.origin, 'GET', '/v1/ready');
      assert.equal(cold.status, 503);
      assert.equal(cold.json.code, 'SERVICE_UNAVAILABLE');
      assert.match(cold.json.message, /edge is warming up/);
      warm = true;
      const ready = await call(s.origin, 'GET', '/v1/ready');
      assert.equal(ready.status, 200);
      assert.deepEqual(ready.json, { status: 'ready', checks: { database: 'ok', edge: 'warm' } });
    } finally {
      await s.close();
      await tdb.drop();
    }
  });
});

describe('readiness without a usable database', () => {
  it('is 503 when the migrations table is missing', async () => {
    const tdb = await (await import('../helpers/db.ts')).freshDatabase({ migrate: false });
    const s = await serveBareCore(tdb.db);
    try {
      const r = await call(s.origin, 'GET', '/v1/ready');
      assert.equal(r.status, 503);
      assert.equal(r.json.code, 'SERVICE_UNAVAILABLE');
      assert.match(r.json.message, /migrations/);
    } finally {
      await s.close();
      await tdb.drop();
    }
  });

  it('is 503 (not a hang, not a crash) when the database is gone, while health stays 200', async () => {
    const { createDb } = await import('../../shared/db/pool.ts');
    const { buildCore } = await import('../../core/app.ts');
    const { createLogger } = await import('../../shared/log.ts');
    const { createMetrics } = await import('../../shared/metrics.ts');
    const { readBuildInfo } = await import('../../core/platform/build-info.ts');
    const { serve } = await import('../helpers/http.ts');
    const { freePort } = await import('../../shared/net.ts');
    const metrics = createMetrics();
    const log = createLogger('silent');
    const db = createDb({
      connectionString: `postgres://x:y@127.0.0.1:${await freePort()}/none`,
      metrics,
      log,
    });
    const core = buildCore({
      db,
      log,
      metrics,
      build: readBuildInfo(),
      keys: new KeyStore(db, randomBytes(32)),
      edgeSecrets: testEdgeSecrets,
    });
    const s = await serve(core.server);
    try {
      const r = await call(s.origin, 'GET', '/v1/ready');
      assert.equal(r.status, 503);
      assert.equal(r.json.code, 'SERVICE_UNAVAILABLE');
      assert.equal((await call(s.origin, 'GET', '/v1/health')).status, 200);
      const v = await call(s.origin, 'GET', '/v1/version');
      assert.equal(v.json.schema_hash, 'unavailable');
    } finally {
      await s.close();
      await db.close();
    }
  });
});
