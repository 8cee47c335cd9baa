/**
 * Issue 20 item 2 through the dev gateway, nothing mocked: the platform admin (the demo Admin
 * service token) creates tenants only with resident regions that include the cluster's (KE, as
 * `npm start` labels it), and after the cluster is relabelled the gateway answers 421
 * TENANT_NOT_RESIDENT for the tenant that may not live there while serving the others.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, eventually, type Res } from '../helpers/http.ts';

describe('resident_regions through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let adminToken = '';

  const admin = (method: string, path: string, json?: unknown): Promise<Res> =>
    call(gw, method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: {
        authorization: `Bearer ${adminToken}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `residency-${randomUUID()}`,
      },
    });
  const create = (id: string, residentRegions: string[]) =>
    admin('POST', '/v1/tenants', { id, name: id, country: 'KE', baseCurrency: 'KES', residentRegions });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-residency-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: { admin: { token: string } };
    };
    adminToken = demo.serviceTokens.admin.token;
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('creates tenants only where they may live, and refuses one after its cluster is relabelled', async () => {
    assert.deepEqual((await tdb.db.query('SELECT region, labelled_by FROM cluster_identity')).rows, [
      { region: 'KE', labelled_by: 'stack' },
    ]);
    const refused = await create('uganda-branch', ['UG']);
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.json.code, 'RESIDENCY_REGION_MISMATCH');
    assert.equal((await create('kenya-branch', ['KE'])).status, 201);
    assert.equal((await create('east-branch', ['UG', 'KE'])).status, 201);
    const before = await eventually(
      () => admin('GET', '/v1/tenants/kenya-branch'),
      (r) => r.status === 200,
    );
    assert.deepEqual(before.json.residentRegions, ['KE']);

    await tdb.db.query(`UPDATE cluster_identity SET region = 'UG', labelled_by = 'ops:test'`);
    const gone = await eventually(
      () => admin('GET', '/v1/tenants/kenya-branch'),
      (r) => r.status !== 200,
    );
    assert.equal(gone.status, 421, gone.text);
    assert.equal(gone.headers['content-type'], 'application/problem+json');
    assert.equal(gone.json.code, 'TENANT_NOT_RESIDENT');
    assert.equal((await admin('GET', '/v1/tenants/east-branch')).status, 200, 'its regions include UG');
    assert.equal((await admin('GET', '/v1/tenants/demo')).status, 200, 'no placement restriction set');
    const audit = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = '_platform' AND action = 'tenant.residency_refused' AND target ->> 'id' = 'kenya-branch'`,
    );
    assert.equal(audit.rowCount, 1);

    await tdb.db.query(`UPDATE cluster_identity SET region = 'KE', labelled_by = 'ops:test'`);
    assert.equal(
      (
        await eventually(
          () => admin('GET', '/v1/tenants/kenya-branch'),
          (r) => r.status === 200,
        )
      ).status,
      200,
    );
  });
});
