/**
 * Edge authorization benchmark (issue: p50/p99/p99.9 at 1,000 req/s and the maximum sustained
 * rate; SPEC 8: decision p99 < 5 ms, token verification plus session check p99 < 2 ms).
 *
 *   npx tsx bench/authz/run.ts [--requests 10000] [--rps 1000]
 *
 * Starts an embedded PostgreSQL in a temporary directory, the real edge (policy bundle, cached
 * state, decision audit), and drives Check from a separate process with `ghz` using realistic
 * CheckRequests: a transfer with an AAL 2 JWT, a masked read, and a denied cross-tenant call.
 * In the same run it starts opa-envoy-plugin (OPA's own ext_authz server, pinned and built on
 * first use, see opa-envoy.ts) with the same Rego behind an adapter that verifies the same token
 * and reads the same session, tuples and tenant (as data), checks that it reaches the same
 * decision for every scenario, drives it with the same requests, and prints our figures as a
 * ratio to its figures. A "floor" line shows the same gRPC server with an empty decision under
 * the same load: what this machine's scheduling alone costs. Prints; asserts nothing beyond the decisions agreeing.
 *
 * Issue 18 item 1: every scenario line carries this process's event-loop delay and GC pauses
 * over that scenario (this process is the edge: the bench only waits on ghz meanwhile); every
 * scenario is shown as a ratio to the floor measured in the same run; the scenarios run again
 * with a CPU hog (a busy-loop process on one core) beside a floor measured with the same hog;
 * and the maximum sustained rate (the highest offered rate whose p99 stays under 5 ms with no
 * errors) is searched for the edge, the floor and opa-envoy-plugin. The machine's load is
 * printed at the start and the end: compare figures within one run only. The edge records every
 * decision's policy input as production does by default (issue 22 item 1), and one more line
 * runs the transfer for a tenant with a shadow candidate loaded (issue 22 item 3: its cost).
 *   npx tsx bench/authz/run.ts [--requests 10000] [--rps 1000] [--no-plugin 1] [--no-search 1] [--rounds 1]
 */
import { execFile, execFileSync } from 'node:child_process';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { promisify } from 'node:util';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditThread, AuditWriter, failClosedReserve, maxQueued } from '../../edge/audit-writer.ts';
import { authenticate } from '../../edge/auth/principal.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { storeCandidate } from '../../core/policy/candidates.ts';
import { ShadowFeed } from '../../edge/shadow.ts';
import { authorizationPackage, envoyProtoIncludeDirs } from '../../edge/proto.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { bindEdge, check, createEdgeServer } from '../../edge/server.ts';
import { EdgeState } from '../../edge/state/store.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import * as grpc from '@grpc/grpc-js';
import { origOf } from '../../shared/challenge.ts';
import { option, percentile, runBench, withDatabase } from '../lib/harness.ts';
import { LoopProbe, cpuPerRequest, formatLoop, machineLoad, showingLoad } from '../lib/probe.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import {
  ensureOpaEnvoyPlugin,
  opaEnvoyPluginVersion,
  routesForRego,
  startOpaEnvoyPlugin,
} from './opa-envoy.ts';

const execFileAsync = promisify(execFile);

const requests = option('requests', 10_000);
const rps = option('rps', 1000);
const withPlugin = option('no-plugin', 0) === 0;
const withSearch = option('no-search', 0) === 0;
/** `--in-process 1`: only the in-process Check timings (no ghz): quick, and what a `--cpu-prof` of the decision reads. */
const inProcessOnly = option('in-process', 0) === 1;
/**
 * `--rounds N`: the floor and the scenarios run N times in turn (quiet, then again with the hog),
 * and each ratio compares the latencies of all N runs pooled: the floor's and a scenario's tails
 * then come from the same stretch of the machine's time, where one 5 s run of each can differ by
 * 0.5x on this machine from a stall that happened to fall in one of them.
 */
const rounds = Math.max(1, option('rounds', 1));
/** SPEC 8: the decision's p99 target; the sustained-rate search keeps under it. */
const p99TargetNs = 5e6;
const probe = new LoopProbe();

function ghzPath(): string {
  const gopath = execFileSync('go', ['env', 'GOPATH']).toString().trim();
  return join(gopath, 'bin', 'ghz');
}

const ms = (ns: number) => (ns / 1e6).toFixed(3);

interface GhzReport {
  rps: number;
  count: number;
  latencyDistribution: { percentage: number; latency: number }[];
  statusCodeDistribution: Record<string, number>;
  errorDistribution?: Record<string, number>;
  details?: { latency: number }[];
  loop?: string;
}

async function ghz(
  address: string,
  data: CheckRequest,
  opts: { rps: number; n: number; c: number },
  dir: string,
): Promise<GhzReport> {
  const file = join(dir, `req-${randomUUID()}.json`);
  const raw = data.attributes?.request?.http?.raw_body;
  const json = JSON.parse(
    JSON.stringify(data, (k, v: unknown) => (k === 'raw_body' ? undefined : v)),
  ) as CheckRequest;
  if (raw && json.attributes?.request?.http)
    (json.attributes.request.http as Record<string, unknown>).raw_body = Buffer.from(raw).toString('base64');
  await writeFile(file, JSON.stringify(json));
  const args = [
    '--insecure',
    '--proto',
    'envoy/service/auth/v3/external_auth.proto',
    '--import-paths',
    envoyProtoIncludeDirs.join(','),
    '--call',
    'envoy.service.auth.v3.Authorization.Check',
    '-D',
    file,
    '-n',
    String(opts.n),
    '-c',
    String(opts.c),
    '--connections',
    '2',
    '--format',
    'json',
    '--timeout',
    '1s',
  ];
  if (opts.rps > 0) args.push('--rps', String(opts.rps));
  // Asynchronously: this process serves the Check calls ghz makes.
  probe.start();
  const { stdout: out } = await execFileAsync(ghzPath(), [...args, address], { maxBuffer: 64 * 1024 * 1024 });
  const summary = probe.stop();
  const loop = `${formatLoop(summary)}, ${cpuPerRequest(summary, opts.n)}`;
  const report = JSON.parse(out) as GhzReport;
  if (!report.latencyDistribution)
    throw new Error(
      `ghz reported no latencies: ${JSON.stringify(report.errorDistribution ?? report.statusCodeDistribution)}`,
    );
  return { ...report, loop };
}

// ghz's summary stops at p99; the per-call details give p99.9.
const at = (r: GhzReport, p: number) =>
  r.latencyDistribution.find((d) => d.percentage === p)?.latency ??
  percentile(
    (r.details ?? []).map((d) => d.latency).sort((x, y) => x - y),
    p,
  );

function line(name: string, r: GhzReport, offered = 0): string {
  const saturated = offered > 0 && r.rps < offered * 0.95 ? '  (below the offered rate: saturated)' : '';
  return `${name.padEnd(30)} p50 ${ms(at(r, 50)).padStart(7)} ms  p99 ${ms(at(r, 99)).padStart(7)} ms  p99.9 ${ms(at(r, 99.9)).padStart(7)} ms  ${r.rps.toFixed(0).padStart(6)} req/s  ${JSON.stringify(r.statusCodeDistribution)}${saturated}\n${' '.repeat(32)}edge process: ${r.loop ?? 'not this process'}`;
}

/** p99 and p99.9 as a ratio to the floor's, against the issue's targets. */
function ratioLine(
  name: string,
  r: GhzReport,
  floor: GhzReport,
  p99Target: number,
  p999Target: number,
): string {
  const p99 = at(r, 99) / at(floor, 99);
  const p999 = at(r, 99.9) / at(floor, 99.9);
  const mark = (x: number, t: number) => `${x.toFixed(2)}x (target ≤ ${t}x${x <= t ? ', met' : ', NOT met'})`;
  return `  ${name.padEnd(30)} p99 ${mark(p99, p99Target)}  p99.9 ${mark(p999, p999Target)}`;
}

/** Sustained: every call answered OK and at least 95 % of the offered rate achieved. */
const sustained = (r: GhzReport, offered: number) =>
  Object.keys(r.errorDistribution ?? {}).length === 0 &&
  Object.entries(r.statusCodeDistribution).every(([k, n]) => k === 'OK' || n === 0) &&
  r.rps >= offered * 0.95 &&
  at(r, 99) < p99TargetNs;

/**
 * The highest offered rate whose p99 stays under SPEC 8's 5 ms with no errors: the rate grows
 * by half until it fails, then the gap is halved three times. Each step runs two seconds.
 */
async function maxSustainedRate(address: string, r: CheckRequest, dir: string): Promise<SustainedRate> {
  let good: { rate: number; report?: GhzReport } = { rate: 0 };
  let lowest: { rate: number; report: GhzReport } | undefined;
  let bad = 0;
  const attempt = async (rate: number) => {
    const report = await ghz(address, r, { rps: rate, n: Math.max(rate * 2, 100), c: 32 }, dir);
    if (!lowest || rate < lowest.rate) lowest = { rate, report };
    if (sustained(report, rate)) good = { rate, report };
    else bad = rate;
  };
  for (let rate = 500; bad === 0; rate = Math.round(rate * 1.5)) {
    await attempt(rate);
    if (rate > 50_000) break;
  }
  for (let i = 0; i < 3 && bad > 0; i++) await attempt(Math.round((good.rate + bad) / 2));
  // Nothing sustained: halve further, so "below N req/s" says how far down it was tried.
  while (good.rate === 0 && (lowest?.rate ?? 0) > 20) await attempt(Math.round((lowest?.rate ?? 0) / 2));
  return { ...good, ...(lowest ? { lowest } : {}) };
}

interface SustainedRate {
  rate: number;
  report?: GhzReport;
  /** The lowest rate tried: when nothing was sustained, its maximum is below this. */
  lowest?: { rate: number; report: GhzReport };
}

const sayRate = (name: string, m: SustainedRate) =>
  process.stdout.write(
    `${`max sustained: ${name}`.padEnd(44)} ${
      m.rate > 0 || !m.lowest
        ? `${String(m.rate).padStart(6)} req/s offered${m.report ? `  (p99 ${ms(at(m.report, 99))} ms at it; ${m.report.loop})` : ''}`
        : `none of the rates tried: below ${m.lowest.rate} req/s (at ${m.lowest.rate}: p99 ${ms(at(m.lowest.report, 99))} ms, ${Math.round(m.lowest.report.rps)} req/s answered)`
    }\n`,
  );

/** A busy loop on one core for the hog scenario (issue 18 item 1): another tenant of the machine. */
function startHog(): ChildProcess {
  return spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
}

type CheckClient = grpc.Client & {
  Check(
    r: CheckRequest,
    o: grpc.CallOptions,
    cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void,
  ): void;
};

/** One Check, summarised: `allow`, or `deny <HTTP status> <code>`. */
async function outcomeOf(address: string, r: CheckRequest): Promise<string> {
  const { Authorization } = authorizationPackage();
  const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as CheckClient;
  try {
    const res = await new Promise<CheckResponse | undefined>((resolve, reject) =>
      client.Check(r, { deadline: Date.now() + 2000 }, (e, out) => (e ? reject(e) : resolve(out))),
    );
    if (res?.ok_response) return 'allow';
    const body = res?.denied_response?.body ?? '';
    let code = '';
    try {
      code = (JSON.parse(body) as { code?: string }).code ?? '';
    } catch {
      code = body;
    }
    return `deny ${res?.denied_response?.status.code ?? '?'} ${code}`;
  } finally {
    client.close();
  }
}

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
  const customerId = randomUUID();
  const sid = randomUUID();
  await db.query(
    `INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, 't1', '+254700000001', now())`,
    [customerId],
  );
  await db.query(
    `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, ip, created_at, last_seen) VALUES ($1, 't1', 'customer', $2, 'j', 2, '127.0.0.1', now(), now())`,
    [sid, customerId],
  );
  await db.query(
    `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id) VALUES ('t1', 'customer', $1, 'member', 'tenant', 't1')`,
    [customerId],
  );
  const token = await keys.sign(
    't1',
    { sub: customerId, sid, aal: 2, amr: ['pin', 'otp'], jti: randomUUID(), aud: 'payments-api' },
    { expiresInS: 3600, typ: 'at+jwt' },
  );
  return { keys, customerId, sid, token };
}
type Fixture = Awaited<ReturnType<typeof seedCustomer>>;

/** The edge as production runs it: cached state, the signed bundle, the decision audit, gRPC. */
async function startEdge(db: Db, url: string, keys: KeyStore, log: Log) {
  const state = new EdgeState(db, new TokenVerifier(db), keys.apiKeySecrets, log);
  await state.start();
  const policies = new PolicyStore(await loadTrustedKeys());
  await policies.load(defaultBundleDir);
  // As in production (edge/main.ts, default settings): the decision audit is written by its own
  // thread, which also records every decision's policy input for replay (issue 22 item 1).
  const audit = new AuditWriter(
    db,
    log,
    maxQueued,
    failClosedReserve,
    new AuditThread(url, undefined, { key: randomBytes(32), retentionHours: 168, maxBytes: 1024 ** 3 }),
  );
  audit.recordInputs({ sample: 1, retentionDays: () => undefined });
  audit.start();
  const decide = createDecider({
    state,
    challenges: keys.challenges,
    policies,
    audit,
    risk: new RiskEngine(),
    log,
    edgeSecret: 'bench',
  });
  const server = createEdgeServer({ log, decide, resolve: buildRouteTable(routeDeclarations) });
  const address = `127.0.0.1:${await bindEdge(server, 0)}`;
  return { state, policies, audit, decide, server, address };
}
type Edge = Awaited<ReturnType<typeof startEdge>>;

/** A CheckRequest as Envoy sends it for this method, path, body and bearer token. */
function checkRequest(method: string, path: string, body: string | undefined, bearer: string): CheckRequest {
  return {
    attributes: {
      source: { address: { socket_address: { address: '127.0.0.1', port_value: 40000 } } },
      request: {
        http: {
          id: 'bench',
          method,
          path,
          host: 'api.example',
          scheme: 'https',
          protocol: 'HTTP/2',
          headers: {
            ':method': method,
            ':path': path,
            ':authority': 'api.example',
            authorization: `Bearer ${bearer}`,
            'content-type': 'application/json',
            'user-agent': 'bench',
          },
          raw_body: Buffer.from(body ?? ''),
          size: String(body?.length ?? 0),
        },
      },
    },
  };
}

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

/** Each scenario's decision, checked once before the load (ghz sees only the gRPC status). */
async function decisionsOf(address: string, scenarios: Scenario[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const [name, r] of scenarios) {
    outcomes.push(await outcomeOf(address, r));
    process.stdout.write(`decision for "${name}": ${outcomes.at(-1)}\n`);
  }
  return outcomes;
}

/** The machine's floors: an empty decision, and one answering what the read scenario answers. */
async function startFloors(log: Log, decide: Decide, readRequest: CheckRequest) {
  // The machine's floor: the same gRPC server and request with a decision that does nothing
  // (no token, state, policy or audit), under the same load, sharing the same cores with ghz.
  const floorServer = createEdgeServer({
    log,
    decide: () => ({ allow: true, status: 200 }),
    resolve: buildRouteTable(routeDeclarations),
  });
  const floorAddress = `127.0.0.1:${await bindEdge(floorServer, 0)}`;
  // The floor answering what the read scenario answers (its identity headers and masking):
  // what encoding the answer costs, apart from deciding it.
  const readView = viewOf(readRequest);
  const readAnswer = await decide(
    readView,
    buildRouteTable(routeDeclarations)(readView.method, readView.path),
  );
  const answerServer = createEdgeServer({
    log,
    decide: () => readAnswer,
    resolve: buildRouteTable(routeDeclarations),
  });
  const answerAddress = `127.0.0.1:${await bindEdge(answerServer, 0)}`;
  return { floorServer, floorAddress, answerServer, answerAddress };
}

/** The same edge with its decision audit discarded (a diagnostic, not a configuration). */
async function startUnaudited(db: Db, log: Log, keys: KeyStore, edge: Edge) {
  // Diagnostic, not a configuration: the same edge with its decision audit discarded instead of
  // written to PostgreSQL, which shares this machine's two cores (what the audit's write costs here).
  const discarded = new AuditWriter(db, log, maxQueued, failClosedReserve, {
    write: async () => undefined,
  });
  discarded.start();
  const unauditedDecide = createDecider({
    state: edge.state,
    challenges: keys.challenges,
    policies: edge.policies,
    audit: discarded,
    risk: new RiskEngine(),
    log,
    edgeSecret: 'bench',
  });
  const unaudited = createEdgeServer({
    log,
    decide: unauditedDecide,
    resolve: buildRouteTable(routeDeclarations),
  });
  const unauditedAddress = `127.0.0.1:${await bindEdge(unaudited, 0)}`;
  return { discarded, unauditedDecide, unaudited, unauditedAddress };
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
  const { candidate } = await storeCandidate(db, edge.policies, 't1', 'bench', {
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
  const shadowed = createEdgeServer({
    log,
    decide: createDecider({
      state: edge.state,
      challenges: keys.challenges,
      policies: edge.policies,
      audit: edge.audit,
      shadow,
      risk: new RiskEngine(),
      log,
      edgeSecret: 'bench',
    }),
    resolve: buildRouteTable(routeDeclarations),
  });
  const shadowedAddress = `127.0.0.1:${await bindEdge(shadowed, 0)}`;
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
  const unaudited = await startUnaudited(db, log, f.keys, edge);
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

/** One scenario at the offered rate after a warm-up, printed; its report. */
async function loadLine(name: string, address: string, r: CheckRequest, dir: string): Promise<GhzReport> {
  await ghz(address, r, { rps: 0, n: 2000, c: 16 }, dir); // warm caches, JIT and heap
  const report = await ghz(address, r, { rps, n: requests, c: 16 }, dir);
  process.stdout.write(`${line(name, report, rps)}\n`);
  return report;
}

/** Several runs of one line as one: their per-call latencies pooled, their counts summed. */
function pooled(runs: GhzReport[]): GhzReport {
  const first = runs[0];
  if (!first || runs.length === 1) return first as GhzReport;
  const lat = runs.flatMap((r) => (r.details ?? []).map((d) => d.latency)).sort((x, y) => x - y);
  const codes: Record<string, number> = {};
  for (const r of runs)
    for (const [k, n] of Object.entries(r.statusCodeDistribution)) codes[k] = (codes[k] ?? 0) + n;
  return {
    ...first,
    rps: runs.reduce((a, r) => a + r.rps, 0) / runs.length,
    count: runs.reduce((a, r) => a + r.count, 0),
    latencyDistribution: [50, 99, 99.9].map((percentage) => ({
      percentage,
      latency: percentile(lat, percentage),
    })),
    statusCodeDistribution: codes,
    details: lat.map((latency) => ({ latency })),
    loop: 'pooled (each run above)',
  };
}

/** The floor and every scenario at the offered rate, after a warm-up of each; `rounds` times, pooled. */
async function ghzRound(
  label: string,
  edge: Edge,
  cmp: Comparisons,
  scenarios: Scenario[],
  dir: string,
): Promise<{ floor: GhzReport; ours: GhzReport[] }> {
  const floors: GhzReport[] = [];
  const ours: GhzReport[][] = scenarios.map(() => []);
  for (let round = 1; round <= rounds; round++) {
    const one = await ghzRoundOnce(
      rounds > 1 ? `${label}, run ${round} of ${rounds}` : label,
      edge,
      cmp,
      scenarios,
      dir,
    );
    floors.push(one.floor);
    one.ours.forEach((r, i) => ours[i]?.push(r));
  }
  if (rounds > 1) {
    process.stdout.write(`${label}, ${rounds} runs pooled:\n`);
    process.stdout.write(`${line('floor: empty decision', pooled(floors))}\n`);
    for (const [i, [name]] of scenarios.entries())
      process.stdout.write(`${line(name, pooled(ours[i] ?? []))}\n`);
  }
  return { floor: pooled(floors), ours: ours.map(pooled) };
}

async function ghzRoundOnce(
  label: string,
  edge: Edge,
  cmp: Comparisons,
  scenarios: Scenario[],
  dir: string,
): Promise<{ floor: GhzReport; ours: GhzReport[] }> {
  process.stdout.write(`${label} (${machineLoad()})\n`);
  const floorRequest = scenarios[1]?.[1] as CheckRequest;
  const transfer = scenarios[0]?.[1] as CheckRequest;
  const floor = await loadLine('floor: empty decision', cmp.floorAddress, floorRequest, dir);
  await loadLine("floor with the read's answer", cmp.answerAddress, floorRequest, dir);
  const out: GhzReport[] = [];
  for (const [name, r] of scenarios) out.push(await loadLine(name, edge.address, r, dir));
  await loadLine('transfer, audit discarded (diagnostic)', cmp.unauditedAddress, transfer, dir);
  await loadLine('transfer, tenant with a shadow candidate', cmp.shadowedAddress, transfer, dir);
  process.stdout.write(`${' '.repeat(32)}shadow thread so far: ${JSON.stringify(cmp.shadow.stats)}\n`);
  return { floor, ours: out };
}

/** Both rounds (quiet, then beside a CPU hog) as ratios to their floors, the unthrottled rate, the search. */
async function loadRuns(edge: Edge, cmp: Comparisons, scenarios: Scenario[], dir: string) {
  const quiet = await ghzRound('without a hog', edge, cmp, scenarios, dir);
  process.stdout.write('as a ratio to the floor of the same run (issue 18: p99 ≤ 1.5x, p99.9 ≤ 2x):\n');
  for (const [i, [name]] of scenarios.entries())
    process.stdout.write(`${ratioLine(name, quiet.ours[i] as GhzReport, quiet.floor, 1.5, 2)}\n`);
  const hog = startHog();
  let hogged: { floor: GhzReport; ours: GhzReport[] };
  try {
    hogged = await ghzRound('with a CPU hog (a busy-loop process on one core)', edge, cmp, scenarios, dir);
  } finally {
    hog.kill();
  }
  process.stdout.write('with the hog, as a ratio to the floor measured with the hog (issue 18: ≤ 3x):\n');
  for (const [i, [name]] of scenarios.entries())
    process.stdout.write(`${ratioLine(name, hogged.ours[i] as GhzReport, hogged.floor, 3, 3)}\n`);
  const transfer = scenarios[0]?.[1] as CheckRequest;
  const max = await ghz(edge.address, transfer, { rps: 0, n: requests, c: 32 }, dir);
  process.stdout.write(`${line('unthrottled (transfer, c=32)', max)}\n`);
  let ourRate: SustainedRate = { rate: 0 };
  let floorRate: SustainedRate = { rate: 0 };
  if (withSearch) {
    ourRate = await maxSustainedRate(edge.address, transfer, dir);
    sayRate('transfer', ourRate);
    floorRate = await maxSustainedRate(cmp.floorAddress, scenarios[1]?.[1] as CheckRequest, dir);
    sayRate('floor (empty decision)', floorRate);
  }
  return { ours: quiet.ours, max, ourRate, floorRate };
}
type LoadRuns = Awaited<ReturnType<typeof loadRuns>>;

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

/** opa-envoy-plugin: the same Rego, requests and state (the rows the fixture wrote, as data). */
async function startPlugin(dir: string, f: Fixture, state: EdgeState) {
  return startOpaEnvoyPlugin(
    ensureOpaEnvoyPlugin((l) => process.stdout.write(`${l}\n`)),
    dir,
    {
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
    },
  );
}

/** Ours as a ratio to the plugin's, per scenario, unthrottled, and in sustained rate. */
function printVersusPlugin(
  scenarios: Scenario[],
  load: LoadRuns,
  theirs: { reports: GhzReport[]; max: GhzReport; rate: SustainedRate },
): void {
  process.stdout.write('ours as a ratio to opa-envoy-plugin (below 1 = faster):\n');
  for (const [i, [name]] of scenarios.entries()) {
    const o = load.ours[i] as GhzReport;
    const t = theirs.reports[i] as GhzReport;
    process.stdout.write(
      `  ${name.padEnd(30)} p50 ${(at(o, 50) / at(t, 50)).toFixed(2)}x  p99 ${(at(o, 99) / at(t, 99)).toFixed(2)}x  p99.9 ${(at(o, 99.9) / at(t, 99.9)).toFixed(2)}x\n`,
    );
  }
  process.stdout.write(
    `  unthrottled throughput ${(load.max.rps / theirs.max.rps).toFixed(2)}x (above 1 = more)\n`,
  );
  if (withSearch) {
    const { ourRate, floorRate } = load;
    const theirRate = theirs.rate;
    // The plugin's maximum is known, or only bounded above by the lowest rate tried.
    const bound = theirRate.rate > 0 ? theirRate.rate : (theirRate.lowest?.rate ?? 0);
    const target = Math.min(6 * bound, floorRate.rate);
    const met = ourRate.rate >= target;
    process.stdout.write(
      `  max sustained rate (p99 < 5 ms, no errors): ours ${ourRate.rate} req/s; opa-envoy-plugin ${theirRate.rate > 0 ? `${theirRate.rate}` : `below ${bound}`} req/s; the floor's own ${floorRate.rate} req/s; target ${theirRate.rate > 0 ? '' : 'at most '}${target} req/s (issue 18: 6x the plugin's, or the floor's maximum if lower: ${met ? 'met' : 'NOT met'})\n`,
    );
  }
}

/** The plugin checked to decide as the edge does, then driven with the same requests and rates. */
async function compareWithPlugin(
  dir: string,
  f: Fixture,
  state: EdgeState,
  scenarios: Scenario[],
  outcomes: string[],
  load: LoadRuns,
): Promise<void> {
  const plugin = await startPlugin(dir, f, state);
  try {
    for (const [i, [name, r]] of scenarios.entries()) {
      const theirs = await outcomeOf(plugin.grpcAddress, r);
      process.stdout.write(`opa-envoy-plugin decision for "${name}": ${theirs}\n`);
      if (theirs !== outcomes[i])
        throw new Error(
          `opa-envoy-plugin decides "${theirs}" where the edge decides "${outcomes[i]}": the comparison would not be like for like`,
        );
    }
    process.stdout.write(`opa-envoy-plugin ${opaEnvoyPluginVersion} via ghz, same requests and rates\n`);
    const reports: GhzReport[] = [];
    for (const [name, r] of scenarios) reports.push(await loadLine(name, plugin.grpcAddress, r, dir));
    const transfer = scenarios[0]?.[1] as CheckRequest;
    const max = await ghz(plugin.grpcAddress, transfer, { rps: 0, n: requests, c: 32 }, dir);
    process.stdout.write(`${line('unthrottled (transfer, c=32)', max)}\n`);
    const rate: SustainedRate = withSearch
      ? await maxSustainedRate(plugin.grpcAddress, transfer, dir)
      : { rate: 0 };
    if (withSearch) sayRate('opa-envoy-plugin transfer', rate);
    printVersusPlugin(scenarios, load, { reports, max, rate });
    process.stdout.write(
      'note: the plugin reads session, tuples and keys from data loaded at start; the edge also keeps them fresh by LISTEN/NOTIFY, assesses risk, and audits every decision\n',
    );
  } finally {
    plugin.stop();
  }
}

async function measure(): Promise<void> {
  const log = createLogger('silent');
  await withDatabase('authz', async (db, dir, url) => {
    const f = await seedCustomer(db);
    const edge = await startEdge(db, url, f.keys, log);
    const scenarios = await scenariosOf(f);
    const outcomes = await decisionsOf(edge.address, scenarios);
    process.stdout.write(`edge Check via ghz, ${requests} requests each at ${rps} req/s, 16 concurrent\n`);
    const cmp = await startComparisons(db, url, log, f, edge, scenarios);
    const floorRequest = scenarios[1]?.[1] as CheckRequest;
    await timeInProcess(log, 'floor (empty decision)', () => ({ allow: true, status: 200 }), floorRequest);
    for (const [name, r] of scenarios)
      await timeInProcess(log, `${name}, audit discarded`, cmp.unauditedDecide, r);
    const empty = () => ({ allow: true, status: 200 });
    await timeInProcess(log, 'floor (empty decision)', empty, floorRequest, 1);
    const [transferName, transfer] = scenarios[0] as [string, CheckRequest];
    await timeInProcess(log, `${transferName}, audit discarded`, cmp.unauditedDecide, transfer, 1);
    if (inProcessOnly) {
      for (const s of [cmp.floorServer, cmp.answerServer, cmp.unaudited, cmp.shadowed, edge.server])
        s.forceShutdown();
      await cmp.shadow.stop();
      await cmp.discarded.stop();
      await edge.audit.stop();
      await edge.state.stop();
      return;
    }
    const load = await loadRuns(edge, cmp, scenarios, dir);
    for (const s of [cmp.floorServer, cmp.answerServer, cmp.unaudited, cmp.shadowed]) s.forceShutdown();
    await cmp.shadow.stop();
    await cmp.discarded.stop();
    await timeTokenCheck(edge.state, viewOf(floorRequest));
    timePolicyEvaluation(edge.policies, f.customerId);
    if (withPlugin) await compareWithPlugin(dir, f, edge.state, scenarios, outcomes, load);
    edge.server.forceShutdown();
    await edge.audit.stop();
    await edge.state.stop();
  });
}

runBench(() => showingLoad(measure));
