/**
 * Issue 20 item 2: SPEC 2.10 `resident_regions` as data placement. The database cluster records
 * its region (migration 0900); a tenant is created only on a cluster in one of its resident
 * regions, no writer can move them away from this cluster's, and a core refuses (421
 * TENANT_NOT_RESIDENT, audited under `_platform`, counted) a tenant whose data may not live
 * where that core's database is, while serving the others. Real core, real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { buildCore, type Core } from '../../core/app.ts';
import { enableCountry } from '../../core/admin/seed.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { asAppError } from '../../shared/errors.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { testEdgeSecrets, viaEdge } from '../helpers/edge-auth.ts';
import { call, eventually, serve, type Res } from '../helpers/http.ts';
import { until } from '../helpers/services.ts';

describe('resident_regions place tenant data', () => {
  let tdb: TestDb;
  let core: Core;
  let origin: string;
  let close: () => Promise<void>;

  /** A request as the edge forwards it for `tenant`'s admin (or the platform admin, tenant `demo`). */
  const as =
    (tenant: string) =>
    (method: string, path: string, json?: unknown): Promise<Res> =>
      call(origin, method, path, {
        ...(json !== undefined ? { json } : {}),
        headers: viaEdge({
          'x-request-id': randomUUID(),
          'x-tenant-id': tenant,
          'x-principal-id': `staff:${tenant}-admin`,
          'x-roles': 'admin',
          'x-client-ip': '10.0.0.1',
          'idempotency-key': randomUUID(),
        }),
      });
  const platform = as('demo');
  const create = (id: string, residentRegions?: string[]) =>
    platform('POST', '/v1/tenants', {
      id,
      name: id,
      country: 'KE',
      baseCurrency: 'KES',
      ...(residentRegions ? { residentRegions } : {}),
    });
  const relabel = (region: string) => tdb.db.query('UPDATE cluster_identity SET region = $1', [region]);

  before(async () => {
    const metrics = createMetrics();
    tdb = await freshDatabase({ metrics });
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('demo', 'Demo', 'KE', 'KES')`,
    );
    await tdb.db.query(`INSERT INTO platform_operator (tenant_id) VALUES ('demo')`);
    await enableCountry(tdb.db, 'KE', 'KES');
    core = buildCore({
      db: tdb.db,
      log: createLogger('silent'),
      metrics,
      build: readBuildInfo(),
      keys: new KeyStore(tdb.db, randomBytes(32)),
      edgeSecrets: testEdgeSecrets,
      checkResponses: true,
      residency: { deploymentRegion: 'KE', labelUnlabelled: true },
    });
    const s = await serve(core.server);
    origin = s.origin;
    close = s.close;
  });
  after(async () => {
    await close();
    await tdb.drop();
  });

  it('labels the unlabelled cluster with the deployment region on first use, and keeps a label once set', async () => {
    assert.equal((await tdb.db.query('SELECT 1 FROM cluster_identity')).rowCount, 0);
    assert.equal((await platform('GET', '/v1/tenants/demo')).status, 200);
    assert.deepEqual((await tdb.db.query('SELECT region, labelled_by FROM cluster_identity')).rows, [
      { region: 'KE', labelled_by: 'core' },
    ]);
    // The label can change (deliberately), never disappear.
    await assert.rejects(tdb.db.query('DELETE FROM cluster_identity'), /cannot be removed/);
  });

  it("creates a tenant only where one of its resident regions is this cluster's", async () => {
    const refused = await create('uganda-only', ['UG']);
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.headers['content-type'], 'application/problem+json');
    assert.equal(refused.json.code, 'RESIDENCY_REGION_MISMATCH');
    assert.match(String(refused.json.detail), /UG.*this cluster is in KE/);
    assert.equal(
      (await tdb.db.query(`SELECT 1 FROM tenants WHERE id = 'uganda-only'`)).rowCount,
      0,
      'nothing created',
    );

    const both = await create('east-africa', ['UG', 'KE']);
    assert.equal(both.status, 201, both.text);
    assert.deepEqual(both.json.residentRegions, ['UG', 'KE']);
    const defaulted = await create('kenya-only');
    assert.equal(defaulted.status, 201, defaulted.text);
    assert.deepEqual(defaulted.json.residentRegions, ['KE'], 'default: where it is created');
    assert.deepEqual(
      (await tdb.db.query(`SELECT security FROM tenants WHERE id = 'kenya-only'`)).rows[0]?.security,
      { resident_regions: ['KE'] },
    );
    const audit = await tdb.db.query<{ attrs: Record<string, unknown> }>(
      `SELECT attrs FROM audit_log WHERE action = 'tenant.create' AND target ->> 'id' = 'kenya-only'`,
    );
    assert.deepEqual(audit.rows[0]?.attrs.residentRegions, ['KE']);
  });

  it("refuses any writer that would move a tenant's resident regions away from this cluster", async () => {
    const err = await tdb.db
      .query(
        `UPDATE tenants SET security = security || '{"resident_regions": ["TZ"]}' WHERE id = 'kenya-only'`,
      )
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(err, 'refused');
    const mapped = asAppError(err);
    assert.equal(mapped.code, 'RESIDENCY_REGION_MISMATCH');
    assert.equal(mapped.status, 422);
    await assert.rejects(
      tdb.db.query(`UPDATE tenants SET security = '{"resident_regions": "KE"}' WHERE id = 'kenya-only'`),
      /must be an array/,
    );
    await assert.rejects(
      tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ('sneaky', 'x', 'KE', 'KES', '{"resident_regions": []}')`,
      ),
      /do not include/,
    );
    // Other settings, and regions that keep this cluster, change freely.
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"require_dpop": true, "resident_regions": ["KE", "RW"]}' WHERE id = 'kenya-only'`,
    );
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"resident_regions": ["KE"]}' WHERE id = 'kenya-only'`,
    );
  });

  it('after the cluster is relabelled, refuses the tenants that may not live there and serves the others', async () => {
    await until(async () => (core.residency.listening ? true : undefined), 10_000, 'the residency listener');
    // Cached while listening: only the NOTIFY of the relabel can change these answers below.
    for (const t of ['kenya-only', 'east-africa', 'demo'])
      assert.equal((await as(t)('GET', `/v1/tenants/${t}`)).status, 200, t);

    await relabel('UG');
    const refused = await eventually(
      () => as('kenya-only')('GET', '/v1/tenants/kenya-only'),
      (r) => r.status !== 200,
    );
    assert.equal(refused.status, 421, refused.text);
    assert.equal(refused.json.code, 'TENANT_NOT_RESIDENT');
    assert.equal(refused.headers['content-type'], 'application/problem+json');
    assert.doesNotMatch(refused.text, /UG|KE/, "the placement is the operator's, not told to callers");
    // The platform admin acting on it is refused too: its data may not be read here either.
    const byPlatform = await platform('GET', '/v1/tenants/kenya-only');
    assert.equal(byPlatform.status, 421);
    // Core's own error format for a customer route.
    const customer = await call(origin, 'POST', '/customers/auth/otp/send', {
      json: { tenantId: 'kenya-only', phone: '+254700000001' },
      headers: viaEdge({
        'x-request-id': randomUUID(),
        'x-tenant-id': 'kenya-only',
        'x-client-ip': '10.0.0.9',
      }),
    });
    assert.equal(customer.status, 421);
    assert.equal(customer.json.code, 'TENANT_NOT_RESIDENT');

    assert.equal(
      (await as('east-africa')('GET', '/v1/tenants/east-africa')).status,
      200,
      'regions include UG',
    );
    assert.equal((await as('demo')('GET', '/v1/tenants/demo')).status, 200, 'no restriction set');
    const list = await platform('GET', '/v1/tenants');
    assert.equal(list.status, 200, 'the platform tenant is still served');

    const audits = await tdb.db.query<{
      actor: { id: string };
      target: { id: string };
      decision: { allow: boolean };
      attrs: Record<string, unknown>;
    }>(
      `SELECT actor, target, decision, attrs FROM audit_log WHERE tenant_id = '_platform' AND action = 'tenant.residency_refused' ORDER BY id`,
    );
    assert.equal(audits.rowCount, 3);
    assert.deepEqual(
      audits.rows.map((r) => r.target.id),
      ['kenya-only', 'kenya-only', 'kenya-only'],
    );
    assert.equal(audits.rows[1]?.actor.id, 'staff:demo-admin');
    assert.equal(audits.rows[0]?.decision.allow, false);
    assert.deepEqual(audits.rows[0]?.attrs.resident_regions, ['KE']);
    assert.equal(audits.rows[0]?.attrs.database_region, 'UG');
    assert.equal(
      (
        await tdb.db.query(
          `SELECT 1 FROM audit_log WHERE tenant_id = 'kenya-only' AND action = 'tenant.residency_refused'`,
        )
      ).rowCount,
      0,
      "nothing written into the refused tenant's own chain",
    );

    const metrics = await call(origin, 'GET', '/v1/metrics');
    assert.match(metrics.text, /^tenant_residency_refusals_total\{tenant="kenya-only"\} 3$/m);
    assert.match(metrics.text, /^core_data_region_info\{deployment_region="KE",database_region="UG"\} 1$/m);

    // Relabelled back: served again, told by the same NOTIFY.
    await relabel('KE');
    const back = await eventually(
      () => as('kenya-only')('GET', '/v1/tenants/kenya-only'),
      (r) => r.status === 200,
    );
    assert.equal(back.status, 200, back.text);
  });
});
