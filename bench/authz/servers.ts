/**
 * The servers the authorization benchmark measures, in a process of their own (forked by
 * `bench/authz/run.ts`, which drives them with ghz and reads the reports): the real edge
 * (cached state, signed bundle, decision audit on its own thread, gRPC), the floors (the same
 * gRPC server with an empty decision, and with the read's answer), the same edge with its audit
 * discarded, without decision inputs, and with a shadow candidate. Issue 18 item 1: the edge runs in a process of its own
 * in production (edge/main.ts); in the bench's own process its heap also held ghz's buffered
 * output and the reports kept for pooling, which survived scavenges and brought on major GCs
 * the edge would not have. Here the heap, the event loop and the GC pauses are the servers'
 * alone, and the probe that reports them (`LoopProbe`) runs in this process on the driver's word.
 *
 * Messages (advanced serialization: a CheckRequest's raw body travels as bytes):
 * driver → here `{ t: 'probe-start' }`, `{ t: 'probe-stop', requests }`, `{ t: 'shadow-stats' }`,
 * `{ t: 'finish' }`; here → driver `{ t: 'ready', … }`, `{ t: 'probe', loop }`, `{ t: 'shadow', stats }`,
 * `{ t: 'finished' }`, `{ t: 'failed', error }`; `probe-start` is answered `{ t: 'probe-started' }`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KeyStore } from '../../core/keys/keys.ts';
import { storeCandidate } from '../../core/policy/candidates.ts';
import { AuditThread, AuditWriter, failClosedReserve, maxQueued } from '../../edge/audit-writer.ts';
import { authenticate } from '../../edge/auth/principal.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import { bindEdge, check, createEdgeServer } from '../../edge/server.ts';
import { boundHeapGrowth } from '../../edge/heap.ts';
import { ShadowFeed } from '../../edge/shadow.ts';
import { EdgeState } from '../../edge/state/store.ts';
import type { CheckRequest } from '../../edge/types.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { origOf } from '../../shared/challenge.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { percentile } from '../lib/harness.ts';
import { LoopProbe, cpuPerRequest, formatLoop, oldGrowthPerRequest } from '../lib/probe.ts';
import { routesForRego, type AdapterState } from './opa-envoy.ts';
import { benchCustomer } from './customer.ts';
import { checkRequest } from './ghz.ts';

const ms = (ns: number) => (ns / 1e6).toFixed(3);

type Log = ReturnType<typeof createLogger>;
type Decide = ReturnType<typeof createDecider>;
type Scenario = [string, CheckRequest];

/** Two tenants; a customer of t1 with a live AAL 2 session and its membership; its access token. */
async function seedCustomer(db: Db) {
  for (const t of ['t1', 't2'])
    await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [
      t,
    ]);
  const keys = new KeyStore(db, randomBytes(32));
  const { customerId, sid, token } = await benchCustomer(db, keys, 't1', {
    phone: '+254700000001',
    aal: 2,
    amr: ['pin', 'otp'],
  });
  return { keys, customerId, sid, token };
}
type Fixture = Awaited<ReturnType<typeof seedCustomer>>;

/** A gRPC Check server on a free loopback port answering with `decide`. */
async function listen(log: Log, decide: Parameters<typeof createEdgeServer>[0]['decide']) {
  const server = createEdgeServer({ log, decide, resolve: buildRouteTable(routeDeclarations) });
  return { server, address: `127.0.0.1:${await bindEdge(server, 0)}` };
}

/** The edge's decider over `state` and `policies`, writing its decisions to `audit` (and `shadow`). */
function deciderOf(
  log: Log,
  keys: KeyStore,
  on: { state: EdgeState; policies: PolicyStore; audit: AuditWriter; shadow?: ShadowFeed },
): Decide {
  return createDecider({
    ...on,
    challenges: keys.challenges,
    risk: new RiskEngine(),
    log,
    edgeSecret: 'bench',
  });
}

/** The audit thread as production starts it: recording decision inputs under a key of its own. */
const productionAuditThread = (url: string) =>
  new AuditThread(url, undefined, { key: randomBytes(32), retentionHours: 168, maxBytes: 1024 ** 3 });

/** The edge as production runs it: cached state, the signed bundle, the decision audit, gRPC. */
async function startEdge(db: Db, url: string, keys: KeyStore, log: Log) {
  const state = new EdgeState(db, new TokenVerifier(db), keys.apiKeySecrets, log);
  await state.start();
  const policies = new PolicyStore(await loadTrustedKeys());
  await policies.load(defaultBundleDir);
  // As in production (edge/main.ts, default settings): the decision audit is written by its own
  // thread, which also records every decision's policy input for replay (issue 22 item 1).
  const audit = new AuditWriter(db, log, maxQueued, failClosedReserve, productionAuditThread(url));
  audit.recordInputs({ sample: 1, retentionDays: () => undefined });
  audit.start();
  const decide = deciderOf(log, keys, { state, policies, audit });
  const { server, address } = await listen(log, decide);
  return { state, policies, audit, decide, server, address };
}
type Edge = Awaited<ReturnType<typeof startEdge>>;

/** The three scenarios: an allowed transfer, an allowed masked read, a denied cross-tenant read. */
async function scenariosOf(f: Fixture): Promise<Scenario[]> {
  // The transfer's AAL 2 token is the one a step-up issued for that very request (SPEC 4.3 rule 3).
  const transferBody = JSON.stringify({
    amount: '250.00',
    currency: 'KES',
    beneficiaryId: 'b1',
    reference: 'r1',
  });
  const transferToken = await f.keys.sign(
    't1',
    {
      sub: f.customerId,
      sid: f.sid,
      aal: 2,
      amr: ['pin', 'device'],
      jti: randomUUID(),
      aud: 'payments-api',
      orig: origOf('POST', '/v1/transfers', transferBody),
    },
    { expiresInS: 3600, typ: 'at+jwt' },
  );
  return [
    ['transfer, AAL 2 JWT (allow)', checkRequest('POST', '/v1/transfers', transferBody, transferToken)],
    ['masked read (allow)', checkRequest('GET', '/v1/transactions?limit=20', undefined, f.token)],
    ['cross-tenant read (deny)', checkRequest('GET', '/v1/transactions?tenantId=t2', undefined, f.token)],
  ];
}

/** The machine's floors: an empty decision, and one answering what the read scenario answers. */
async function startFloors(log: Log, decide: Decide, readRequest: CheckRequest) {
  // The machine's floor: the same gRPC server and request with a decision that does nothing
  // (no token, state, policy or audit), under the same load, sharing the same cores with ghz.
  const { server: floorServer, address: floorAddress } = await listen(log, () => ({
    allow: true,
    status: 200,
  }));
  // The floor answering what the read scenario answers (its identity headers and masking):
  // what encoding the answer costs, apart from deciding it.
  const readView = viewOf(readRequest);
  const readAnswer = await decide(
    readView,
    buildRouteTable(routeDeclarations)(readView.method, readView.path),
  );
  const { server: answerServer, address: answerAddress } = await listen(log, () => readAnswer);
  return { floorServer, floorAddress, answerServer, answerAddress };
}

/** The same edge's state and policies behind a decider with another decision audit, on a server of its own. */
async function edgeWith(log: Log, keys: KeyStore, edge: Edge, audit: AuditWriter) {
  const decide = deciderOf(log, keys, { state: edge.state, policies: edge.policies, audit });
  return { decide, ...(await listen(log, decide)) };
}

/**
 * Three diagnostics, not configurations: the same edge with its decision audit discarded instead of
 * written to PostgreSQL, which shares this machine's two cores (what the audit's write costs
 * here), with the audit written but no decision inputs recorded (what recording every
 * decision's policy input, issue 22 item 1, adds to it), and with the audit as production writes
 * it but flushed every 10 ms instead of every 50 (whether smaller bursts beside the answering
 * thread cost its tail less).
 */
async function startAuditVariants(db: Db, url: string, log: Log, keys: KeyStore, edge: Edge) {
  const discarded = new AuditWriter(db, log, maxQueued, failClosedReserve, {
    write: async () => undefined,
  });
  discarded.start();
  const unaudited = await edgeWith(log, keys, edge, discarded);
  const withoutInputs = new AuditWriter(db, log, maxQueued, failClosedReserve, new AuditThread(url));
  withoutInputs.start();
  const uninputted = await edgeWith(log, keys, edge, withoutInputs);
  // As production writes it (inputs recorded), its batches handed to the thread every 10 ms instead
  // of 50: the same work in smaller bursts beside the answering thread (bench/authz/cost-curve.ts).
  const oftener = new AuditWriter(db, log, maxQueued, failClosedReserve, productionAuditThread(url));
  oftener.recordInputs({ sample: 1, retentionDays: () => undefined });
  oftener.start(10);
  const flushedOftener = await edgeWith(log, keys, edge, oftener);
  return {
    oftener,
    oftenerServer: flushedOftener.server,
    oftenerAddress: flushedOftener.address,
    discarded,
    unauditedDecide: unaudited.decide,
    unaudited: unaudited.server,
    unauditedAddress: unaudited.address,
    withoutInputs,
    uninputted: uninputted.server,
    uninputtedAddress: uninputted.address,
  };
}

/** The same edge with today's bundle loaded as t1's shadow candidate. */
async function startShadowed(db: Db, url: string, log: Log, keys: KeyStore, edge: Edge) {
  // Issue 22 item 3: the same edge with a shadow candidate (today's bundle, uploaded as a
  // candidate) loaded for the transfer's tenant: what evaluating every decision again on the
  // shadow thread costs the live answers.
  const bundleFile = (f: string) => readFile(join(defaultBundleDir, f));
  const [manifest, registryText, wasm] = await Promise.all(
    ['manifest.json', 'registry.json', 'policy.wasm'].map(bundleFile),
  );
  const { candidate } = await storeCandidate(db, { policies: edge.policies, log }, 't1', 'bench', {
    manifest: String(manifest),
    registry: String(registryText),
    wasm: (wasm as Buffer).toString('base64'),
  });
  await db.query(`INSERT INTO policy_shadows (tenant_id, candidate_ref, set_by) VALUES ('t1', $1, 'bench')`, [
    candidate.policy_ref,
  ]);
  const shadow = new ShadowFeed({ db, databaseUrl: url, trustedKeys: await loadTrustedKeys(), log });
  shadow.start();
  await shadow.refresh();
  const { server: shadowed, address: shadowedAddress } = await listen(
    log,
    deciderOf(log, keys, { state: edge.state, policies: edge.policies, audit: edge.audit, shadow }),
  );
  return { shadow, shadowed, shadowedAddress };
}

/** Every server the load compares the edge with, started in the bench's order. */
async function startComparisons(
  db: Db,
  url: string,
  log: Log,
  f: Fixture,
  edge: Edge,
  scenarios: Scenario[],
) {
  const floors = await startFloors(log, edge.decide, scenarios[1]?.[1] as CheckRequest);
  const unaudited = await startAuditVariants(db, url, log, f.keys, edge);
  const shadowed = await startShadowed(db, url, log, f.keys, edge);
  return { ...floors, ...unaudited, ...shadowed };
}
type Comparisons = Awaited<ReturnType<typeof startComparisons>>;

/**
 * The whole Check (request view, route, decision, answer) in process, without gRPC: the
 * decision's own cost beside the floor's, with the audit discarded as in the diagnostic line.
 * `gapMs` > 0 waits that long between calls, as requests arrive at 1,000 req/s: on this
 * machine a CPU that idles between requests runs the next one much slower (issue 18 item 1:
 * what the decision costs the loaded edge, not only back to back).
 */
async function timeInProcess(
  log: Log,
  name: string,
  decide: Parameters<typeof check>[0]['decide'],
  r: CheckRequest,
  gapMs = 0,
): Promise<void> {
  const deps = { log, decide, resolve: buildRouteTable(routeDeclarations) };
  for (let i = 0; i < 2000; i++) await check(deps, r);
  const lat: number[] = [];
  const n = gapMs > 0 ? 3000 : 20000;
  for (let i = 0; i < n; i++) {
    if (gapMs > 0) await new Promise((res) => setTimeout(res, gapMs));
    const t0 = process.hrtime.bigint();
    await check(deps, r);
    lat.push(Number(process.hrtime.bigint() - t0));
  }
  const meanUs = lat.reduce((a, b) => a + b, 0) / n / 1000;
  lat.sort((a, b) => a - b);
  const label = `Check in process${gapMs > 0 ? `, ${gapMs} ms apart` : ''}: ${name}`;
  process.stdout.write(
    `${label.padEnd(48)} mean ${meanUs.toFixed(1)} µs  p50 ${ms(percentile(lat, 50))} ms  p99 ${ms(percentile(lat, 99))} ms\n`,
  );
}

/** In process: token verification plus session check (SPEC 8: p99 < 2 ms). */
async function timeTokenCheck(state: EdgeState, view: ReturnType<typeof viewOf>): Promise<void> {
  const authLat: number[] = [];
  for (let i = 0; i < 5000; i++) {
    const t0 = process.hrtime.bigint();
    await authenticate('customer', view, state, (id) => state.tenant(id), Date.now());
    authLat.push(Number(process.hrtime.bigint() - t0));
  }
  authLat.sort((a, b) => a - b);
  process.stdout.write(
    `token verification + session check (in process)  p50 ${ms(percentile(authLat, 50))} ms  p99 ${ms(percentile(authLat, 99))} ms  (target p99 < 2 ms)\n`,
  );
}

/** In process: the policy's WASM evaluation alone, for the transfer's input. */
function timePolicyEvaluation(policies: PolicyStore, customerId: string): void {
  const input = {
    tenant: { id: 't1', status: 'ACTIVE', security: {} },
    subject: {
      id: customerId,
      type: 'customer',
      aal: 2,
      tuples: [{ relation: 'member', object_ns: 'tenant', object_id: 't1', caveat: {} }],
      stepup_age_s: 10,
    },
    resource: { type: 'transaction', tenant_id: 't1' },
    action: 'transfer.create',
    purpose: 'customer.transact',
    context: { ip: '127.0.0.1', risk: 'low', now_ns: Date.now() * 1e6, local_hour: 12 },
  };
  const evalLat: number[] = [];
  const rev = policies.current;
  for (let i = 0; i < 20000 && rev; i++) {
    const t0 = process.hrtime.bigint();
    rev.evaluate(input);
    evalLat.push(Number(process.hrtime.bigint() - t0));
  }
  evalLat.sort((a, b) => a - b);
  process.stdout.write(
    `policy evaluation alone (WASM, in process)        p50 ${ms(percentile(evalLat, 50))} ms  p99 ${ms(percentile(evalLat, 99))} ms  (target decision p99 < 5 ms)\n`,
  );
}

/** What opa-envoy-plugin is given as data: the rows the fixture wrote, as the edge reads them. */
async function pluginState(f: Fixture, state: EdgeState): Promise<AdapterState> {
  return {
    routes: routesForRego(routeDeclarations),
    jwks: Object.fromEntries(
      await Promise.all(['t1', 't2'].map(async (t) => [t, JSON.stringify(await f.keys.jwks(t))] as const)),
    ),
    tenants: Object.fromEntries(
      await Promise.all(
        ['t1', 't2'].map(async (t) => {
          const row = await state.tenant(t);
          return [t, { status: row?.status ?? 'UNKNOWN', security: row?.security ?? {} }] as const;
        }),
      ),
    ),
    sessions: {
      [f.sid]: {
        tenant_id: 't1',
        subject_type: 'customer',
        subject_id: f.customerId,
        revoked: false,
        last_seen_ns: Date.now() * 1e6,
      },
    },
    tuples: { [f.customerId]: await state.tuplesOf('customer', f.customerId) },
  };
}

/** The in-process timings: each scenario's whole Check beside the floor's, back to back and 1 ms apart. */
async function inProcessTimings(log: Log, cmp: Comparisons, scenarios: Scenario[]): Promise<void> {
  const floorRequest = scenarios[1]?.[1] as CheckRequest;
  const empty = () => ({ allow: true, status: 200 });
  await timeInProcess(log, 'floor (empty decision)', empty, floorRequest);
  for (const [name, r] of scenarios)
    await timeInProcess(log, `${name}, audit discarded`, cmp.unauditedDecide, r);
  await timeInProcess(log, 'floor (empty decision)', empty, floorRequest, 1);
  const [transferName, transfer] = scenarios[0] as [string, CheckRequest];
  await timeInProcess(log, `${transferName}, audit discarded`, cmp.unauditedDecide, transfer, 1);
}

export type FromServers =
  | {
      t: 'ready';
      edge: string;
      floor: string;
      answer: string;
      unaudited: string;
      uninputted: string;
      oftener: string;
      shadowed: string;
      scenarios: Scenario[];
      plugin: AdapterState;
    }
  | { t: 'probe-started' }
  | { t: 'probe'; loop: string }
  | { t: 'shadow'; stats: string }
  | { t: 'finished' }
  | { t: 'failed'; error: string };
export type ToServers =
  | { t: 'probe-start' }
  | { t: 'probe-stop'; requests: number }
  | { t: 'shadow-stats' }
  | { t: 'finish' };

const send = (m: FromServers) => process.send?.(m);

/** Everything stopped, after the timings that need the edge's state and policies in process. */
async function finish(f: Fixture, edge: Edge, cmp: Comparisons, scenarios: Scenario[]): Promise<void> {
  for (const s of [
    cmp.floorServer,
    cmp.answerServer,
    cmp.unaudited,
    cmp.uninputted,
    cmp.oftenerServer,
    cmp.shadowed,
    edge.server,
  ])
    s.forceShutdown();
  await cmp.shadow.stop();
  await cmp.discarded.stop();
  await cmp.withoutInputs.stop();
  await cmp.oftener.stop();
  await timeTokenCheck(edge.state, viewOf(scenarios[1]?.[1] as CheckRequest));
  timePolicyEvaluation(edge.policies, f.customerId);
  await edge.audit.stop();
  await edge.state.stop();
}

/** Start everything, answer the driver's messages until it says finish. */
async function serve(url: string, inProcessOnly: boolean): Promise<void> {
  // As the edge process bounds its heap's growth (edge/heap.ts), unless the driver was given
  // another growth to compare (`--edge-node-flag --heap-growing-percent=0`: V8's own).
  boundHeapGrowth();
  const log = createLogger('silent');
  const db: Db = createDb({ connectionString: url, metrics: createMetrics(), log, max: 20 });
  const f = await seedCustomer(db);
  const edge = await startEdge(db, url, f.keys, log);
  const scenarios = await scenariosOf(f);
  const cmp = await startComparisons(db, url, log, f, edge, scenarios);
  await inProcessTimings(log, cmp, scenarios);
  const probe = new LoopProbe();
  const done = new Promise<void>((resolve, reject) => {
    process.on('message', (m: ToServers) => {
      if (m.t === 'probe-start') {
        probe.start();
        send({ t: 'probe-started' });
      } else if (m.t === 'probe-stop') {
        const summary = probe.stop();
        send({
          t: 'probe',
          loop: `${formatLoop(summary)}, ${cpuPerRequest(summary, m.requests)}, ${oldGrowthPerRequest(summary, m.requests)}`,
        });
      } else if (m.t === 'shadow-stats') send({ t: 'shadow', stats: JSON.stringify(cmp.shadow.stats) });
      else if (m.t === 'finish') finish(f, edge, cmp, scenarios).then(resolve, reject);
    });
  });
  send({
    t: 'ready',
    edge: edge.address,
    floor: cmp.floorAddress,
    answer: cmp.answerAddress,
    unaudited: cmp.unauditedAddress,
    uninputted: cmp.uninputtedAddress,
    oftener: cmp.oftenerAddress,
    shadowed: cmp.shadowedAddress,
    scenarios,
    plugin: inProcessOnly ? ({} as AdapterState) : await pluginState(f, edge.state),
  });
  await done;
  await db.close();
  send({ t: 'finished' });
}

const [url, mode] = process.argv.slice(2);
if (!url || !process.send) {
  process.stderr.write('bench/authz/servers.ts is started by bench/authz/run.ts\n');
  process.exit(2);
}
/**
 * The driver gone (killed, or its channel closed before `finish`): nothing will stop the gRPC
 * servers, the audit thread and the database pool, which would keep this process running
 * orphaned, so it exits.
 */
let finished = false;
process.on('disconnect', () => {
  if (!finished) process.exit(1);
});
serve(url, mode === 'in-process').then(
  () => {
    finished = true;
    process.disconnect();
  },
  (err: unknown) => {
    // What was started before the failure may still listen: the process ends once the driver has the reason.
    finished = true;
    process.exitCode = 1;
    if (process.send)
      process.send({ t: 'failed', error: (err as Error).stack ?? String(err) }, undefined, undefined, () =>
        process.exit(1),
      );
    else process.exit(1);
  },
);
