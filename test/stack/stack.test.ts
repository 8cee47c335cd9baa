import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';

describe('the whole stack through the dev gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'stack-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 2000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('migrates, seeds the demo tenant and lists it in DATA_DIR/demo.json', async () => {
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    assert.deepEqual(demo.tenant, {
      id: 'demo',
      name: 'Demo Mobile Money',
      country: 'KE',
      baseCurrency: 'KES',
    });
    const { rows } = await tdb.db.query('SELECT count(*)::int AS n FROM schema_migrations');
    assert.ok(rows[0]?.n > 0);
  });

  it('serves the platform routes through the gateway', async () => {
    const health = await call(gw, 'GET', '/v1/health');
    assert.equal(health.status, 200);
    assert.deepEqual(Object.keys(health.json).sort(), ['build', 'status', 'uptime_s']);
    assert.equal((await call(gw, 'GET', '/v1/ready')).status, 200);
    const version = await call(gw, 'GET', '/v1/version');
    assert.match(version.json.schema_hash, /^[0-9a-f]{64}$/);
    const metrics = await call(gw, 'GET', '/v1/metrics');
    assert.match(metrics.text, /http_request_duration_seconds_bucket/);
    assert.match(metrics.text, /db_query_duration_seconds_bucket/);
    assert.equal((await call(gw, 'GET', '/v1/docs')).status, 200);
    assert.equal((await call(gw, 'GET', '/v1/openapi.json')).json.openapi, '3.1.0');
  });

  it('answers an unknown route with a JSON error and denies non-platform routes', async () => {
    const unknown = await call(gw, 'GET', '/v1/no-such-route');
    assert.equal(unknown.status, 403);
    assert.equal(typeof unknown.json.code, 'string');
    assert.equal(typeof unknown.json.message, 'string');
  });

  it('writes the master key into DATA_DIR in development', async () => {
    const key = (await readFile(join(dataDir, 'master.key'), 'utf8')).trim();
    assert.equal(Buffer.from(key, 'base64').length, 32);
  });
});
