/**
 * Issue 15 item 6: the edge's Prometheus metrics, scraped from its own /metrics port after real
 * Checks against a real edge (database, policy bundle, audit writer): decisions by purpose,
 * outcome and code, the latency histogram, the loaded policy as info, state age and staleness
 * denials, the audit queue; and every fail-closed reason counted.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { KeyStore, deriveApiKeySealKey, deriveChallengeKey } from '../../core/keys/keys.ts';
import { seedDemo } from '../../core/seed.ts';
import { buildEdge, type Edge } from '../../edge/main.ts';
import { createEdgeMetrics, createOpsServer, FailClosedError, type EdgeMetrics } from '../../edge/metrics.ts';
import type { Decide } from '../../edge/server.ts';
import type { CheckRequest } from '../../edge/types.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { checkClient, envoyRequest, startTestEdge } from '../helpers/edge.ts';
import { call, serve } from '../helpers/http.ts';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (enough of the format for these metrics). */
function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = l[2] as string;
    out.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return out;
}

/** The value of the one sample with this name and exactly these labels (undefined when absent). */
function valueOf(all: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const want = JSON.stringify(Object.entries(labels).sort());
  return all.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
}

describe('edge metrics on its /metrics port', () => {
  let tdb: TestDb;
  let edge: Edge;
  let client: ReturnType<typeof checkClient>;
  let ops: Awaited<ReturnType<typeof serve>>;
  let readOnly: string;
  let skewMs = 0;
  const scrape = async () => {
    const r = await call(ops.origin, 'GET', '/metrics');
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'] ?? '', /^text\/plain/);
    return samples(r.text);
  };

  before(async () => {
    tdb = await freshDatabase();
    const masterKey = randomBytes(32);
    const demo = (await seedDemo(tdb.db, undefined, { keys: new KeyStore(tdb.db, masterKey) })) as {
      serviceTokens: { readOnly: { token: string } };
    };
    readOnly = demo.serviceTokens.readOnly.token;
    edge = await buildEdge({
      db: tdb.db,
      apiKeySealKey: deriveApiKeySealKey(masterKey),
      challengeKeys: [deriveChallengeKey(masterKey)],
      log: createLogger('silent'),
      edgeSecret: 'metrics-test',
      budgetMs: 5000,
      now: () => Date.now() + skewMs,
    });
    // The warm-up rehearsal decides synthetic requests: none of them may be counted.
    await edge.warm();
    client = checkClient(`127.0.0.1:${await edge.listen(0)}`);
    ops = await serve(createOpsServer(edge.metrics.registry, () => edge.serving()));
  });
  after(async () => {
    client.close();
    await ops.close();
    await edge.stop();
    await tdb.drop();
  });

  it('counts allowed and denied Checks by purpose, outcome and code, and times each', async () => {
    const staff = { authorization: `Bearer ${readOnly}` };
    for (let i = 0; i < 2; i++)
      assert.equal(
        (await client.check(envoyRequest('GET', '/v1/countries', { headers: staff }))).status.code,
        0,
      );
    const refused = await client.check(
      envoyRequest('POST', '/v1/products', {
        headers: { ...staff, 'content-type': 'application/json' },
        body: '{"code":"X","category":"Y"}',
      }),
    );
    assert.equal(refused.denied_response?.status.code, 403);
    assert.equal(
      (await client.check(envoyRequest('GET', '/v1/countries'))).denied_response?.status.code,
      401,
    );
    assert.equal((await client.check(envoyRequest('GET', '/v1/accounts'))).denied_response?.status.code, 401);
    // An unmapped path is counted under its route-table purpose, never under its text.
    const stray = `/v1/no-such-${randomUUID()}`;
    await client.check(envoyRequest('GET', stray));

    const text = (await call(ops.origin, 'GET', '/metrics')).text;
    assert.ok(!text.includes(stray.slice(4)), 'no label value from the request path');
    const s = samples(text);
    const decisions = (purpose: string, outcome: string, code: string) =>
      valueOf(s, 'edge_decisions_total', { purpose, outcome, code });
    assert.equal(decisions('operational', 'allow', 'OK'), 2);
    assert.equal(
      decisions('operational', 'deny', 'POLICY_DENIED'),
      2,
      'the refused mutation and the unmapped path',
    );
    assert.equal(decisions('operational', 'deny', 'UNAUTHENTICATED'), 1);
    assert.equal(decisions('customer.account.view', 'deny', 'UNAUTHENTICATED'), 1);
    assert.equal(
      s.filter((x) => x.name === 'edge_decisions_total').reduce((n, x) => n + x.value, 0),
      6,
      'the warm-up rehearsal is not counted',
    );
    assert.equal(valueOf(s, 'edge_decision_duration_seconds_count', { outcome: 'allow' }), 2);
    assert.equal(valueOf(s, 'edge_decision_duration_seconds_count', { outcome: 'deny' }), 4);
    assert.ok((valueOf(s, 'edge_decision_duration_seconds_sum', { outcome: 'deny' }) ?? 0) > 0);
    assert.equal(valueOf(s, 'edge_decision_duration_seconds_bucket', { outcome: 'deny', le: '+Inf' }), 4);
    assert.ok(
      s.some((x) => x.name === 'edge_decision_duration_seconds_bucket' && x.labels.le === '0.0001'),
      'sub-millisecond buckets',
    );
  });

  it('names the loaded policy and registry versions, the state age and the audit queue', async () => {
    const s = await scrape();
    const current = edge.policies.current;
    assert.ok(current);
    assert.equal(
      valueOf(s, 'edge_policy_info', {
        policy_version: current.policyVersion,
        registry_version: current.registryVersion,
      }),
      1,
    );
    assert.equal(s.filter((x) => x.name === 'edge_policy_info').length, 1);
    const age = valueOf(s, 'edge_state_age_seconds');
    assert.ok(age !== undefined && age >= 0 && age < 5, `state age ${age}`);
    assert.ok((valueOf(s, 'edge_cache_entries', { cache: 'service_tokens' }) ?? 0) >= 1);
    assert.notEqual(valueOf(s, 'edge_audit_queue_depth'), undefined);
    assert.equal(valueOf(s, 'edge_audit_unrecorded'), 0);
    assert.equal(valueOf(s, 'edge_state_stale_denials_total'), 0);
  });

  it('counts denials for stale state (fail closed) and shows how old the state is', async () => {
    // The listener's heartbeat stops and the clock moves past the 5 s staleness bound.
    await edge.state.stop();
    skewMs = 10_000;
    const res = await client.check(
      envoyRequest('GET', '/v1/countries', { headers: { authorization: `Bearer ${readOnly}` } }),
    );
    assert.equal(res.denied_response?.status.code, 503);
    assert.equal(JSON.parse(res.denied_response?.body ?? '{}').code, 'authz_unavailable');
    const s = await scrape();
    assert.equal(valueOf(s, 'edge_state_stale_denials_total'), 1);
    assert.equal(valueOf(s, 'edge_fail_closed_total', { reason: 'stale_state' }), 1);
    assert.equal(
      valueOf(s, 'edge_decisions_total', {
        purpose: 'operational',
        outcome: 'deny',
        code: 'authz_unavailable',
      }),
      1,
    );
    assert.ok((valueOf(s, 'edge_state_age_seconds') ?? 0) >= 10);
    assert.equal((await call(ops.origin, 'GET', '/ready')).status, 503);
    // Liveness stays up: a database blip must not restart every edge (deploy/k8s/edge.yaml).
    assert.equal((await call(ops.origin, 'GET', '/health')).status, 200);
  });
});

describe('edge fail-closed answers by reason', () => {
  const stub = {
    stateAgeS: () => 0,
    cacheEntries: () => ({}),
    auditQueued: () => 0,
    auditUnrecorded: () => 0,
    policy: () => undefined,
  };

  async function failClosedCounts(decide: Decide, req: CheckRequest, budgetMs = 2000): Promise<EdgeMetrics> {
    const metrics = createEdgeMetrics(new Registry(), stub);
    const edge = await startTestEdge({ log: createLogger('silent'), decide, budgetMs, metrics });
    try {
      const res = await edge.check(req);
      assert.equal(res.denied_response?.status.code, 503);
    } finally {
      await edge.close();
    }
    return metrics;
  }

  const reasonsOf = async (m: EdgeMetrics) =>
    (await m.failClosed.get()).values.map((v) => [v.labels.reason, v.value]);

  it('a decision past its budget is budget_exceeded', async () => {
    const m = await failClosedCounts(
      () => new Promise(() => undefined),
      envoyRequest('GET', '/v1/accounts'),
      20,
    );
    assert.deepEqual(await reasonsOf(m), [['budget_exceeded', 1]]);
    assert.equal((await m.budgetExceeded.get()).values[0]?.value, 1);
    const d = (await m.decisions.get()).values;
    assert.deepEqual(
      d.map((v) => [v.labels, v.value]),
      [[{ purpose: 'customer.account.view', outcome: 'deny', code: 'authz_unavailable' }, 1]],
    );
  });

  it('an overloaded audit, a missing policy and any other fault are told apart', async () => {
    const req = envoyRequest('GET', '/v1/accounts');
    assert.deepEqual(
      await reasonsOf(
        await failClosedCounts(() => {
          throw new FailClosedError('audit_overloaded', 'behind');
        }, req),
      ),
      [['audit_overloaded', 1]],
    );
    assert.deepEqual(
      await reasonsOf(
        await failClosedCounts(() => {
          throw new FailClosedError('no_policy', 'none');
        }, req),
      ),
      [['no_policy', 1]],
    );
    assert.deepEqual(
      await reasonsOf(
        await failClosedCounts(() => {
          throw new Error('something else');
        }, req),
      ),
      [['error', 1]],
    );
  });

  it('a CheckRequest without HTTP attributes is unreadable_request under purpose unknown', async () => {
    const m = await failClosedCounts(() => ({ allow: true, status: 200 }), { attributes: {} });
    assert.deepEqual(await reasonsOf(m), [['unreadable_request', 1]]);
    assert.equal((await m.decisions.get()).values[0]?.labels.purpose, 'unknown');
  });
});
