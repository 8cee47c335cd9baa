import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { buildCore } from '../../core/app.ts';
import { createDb } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { buildRouteTable, edgeRoutes } from '../../edge/routes.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';

describe('edge route table', () => {
  const log = createLogger('silent');
  const metrics = createMetrics();
  // Routes are plain data; building them opens no connection.
  const db = createDb({ connectionString: 'postgres://unused@127.0.0.1:1/none', metrics, log });
  const core = buildCore({
    db,
    log,
    metrics,
    build: readBuildInfo(),
    keys: new KeyStore(db, randomBytes(32)),
    edgeSecrets: testEdgeSecrets,
  });
  const key = (m: string, p: string) => `${m} ${p}`;

  it('maps every route core serves, and nothing core does not serve', async () => {
    const coreSet = new Set(core.routes.map((r) => key(r.method, r.path)));
    const edgeSet = new Set(edgeRoutes.map((r) => key(r.method, r.template)));
    assert.deepEqual(
      [...coreSet].filter((k) => !edgeSet.has(k)),
      [],
      'core routes missing from edge/routes.ts',
    );
    assert.deepEqual(
      [...edgeSet].filter((k) => !coreSet.has(k)),
      [],
      'edge routes core does not serve',
    );
    await db.close();
  });

  it('declares money movement the same way at the edge and in core (issue 13 item 5)', () => {
    const edgeMoney = new Map(edgeRoutes.map((r) => [key(r.method, r.template), r.money]));
    const differ = core.routes
      .filter((r) => r.movesMoney !== edgeMoney.get(key(r.method, r.path)))
      .map(
        (r) =>
          `${key(r.method, r.path)}: core ${String(r.movesMoney)}, edge ${String(edgeMoney.get(key(r.method, r.path)))}`,
      );
    assert.deepEqual(differ, []);
    // The ledger's routes that move money by id are counted by the ledger; by amount, at the edge.
    const ledger = Object.fromEntries(
      core.routes
        .filter((r) => r.path.startsWith('/v1/core/') && r.movesMoney)
        .map((r) => [key(r.method, r.path), r.movesMoney]),
    );
    assert.deepEqual(ledger, {
      'POST /v1/core/postings': 'request',
      'POST /v1/core/postings/{id}/reverse': 'ledger',
      'POST /v1/core/holds': 'request',
      'POST /v1/core/holds/{id}/capture': 'ledger',
    });
  });

  it('marks the administration audience (Problem+JSON) on the same routes as core (issue 15 item 5)', () => {
    const problem = (routes: { key: string; format: string | undefined }[]) =>
      routes
        .filter((r) => r.format === 'problem')
        .map((r) => r.key)
        .sort();
    const atEdge = problem(
      edgeRoutes.map((r) => ({ key: key(r.method, r.template), format: r.errorFormat })),
    );
    const inCore = problem(core.routes.map((r) => ({ key: key(r.method, r.path), format: r.errorFormat })));
    assert.deepEqual(atEdge, inCore);
    assert.ok(atEdge.includes('POST /v1/products') && !atEdge.includes('GET /v1/accounts'));
  });

  it('derives the purpose from method and template; unmapped paths get operational', () => {
    const resolve = buildRouteTable();
    assert.equal(resolve('GET', '/v1/health').purpose, 'operational');
    const unmapped = resolve('DELETE', '/v1/anything/else');
    assert.equal(unmapped.route, undefined);
    assert.equal(unmapped.purpose, 'operational');
  });

  it('every entry names a purpose, a resource type and an action', () => {
    for (const r of edgeRoutes) {
      assert.ok(r.purpose && r.resource && r.action, key(r.method, r.template));
    }
  });
});
