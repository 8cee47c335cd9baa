/**
 * The whole request path under load (issue 18 item 3): edge, core and the dev gateway as
 * separate processes (`bin/services/*.ts`, what `npm run edge|core|gateway` start), on an
 * embedded PostgreSQL in a temporary directory. The dev gateway stands in for Envoy here (it
 * mirrors deploy/envoy/envoy.yaml: ext_authz over gRPC with a 100 ms budget, then the route to
 * core); Envoy itself is not installed on this machine.
 *
 * autocannon drives, from its own process (bench/path/load.ts), 16 connections for `--seconds`:
 *   - GET /v1/accounts with a customer's access token, and
 *   - POST /v1/core/postings (two legs, a fresh Idempotency-Key each) with a core client's token,
 * each through the gateway (gateway → edge Check → core → PostgreSQL) and straight to core with
 * the identity headers the edge sets for that very request (taken from the edge's own Check
 * answer, x-edge-auth included). It prints p50/p99/p99.9 and throughput of the 2xx answers (every
 * status counted beside them) for each and the
 * edge+gateway overhead as a ratio, with the machine's load at the start and the end.
 *
 *   npx tsx bench/path/run.ts [--seconds 10] [--connections 16]
 *
 * The services run in development mode (MODE=development) only so that sign-up codes land in
 * DATA_DIR's inbox; every secret is given explicitly, as production configures it.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { KeyStore } from '../../core/keys/keys.ts';
import { seedDemo } from '../../core/seed.ts';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { authorizationPackage } from '../../edge/proto.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import type { Db } from '../../shared/db/pool.ts';
import { freePort } from '../../shared/net.ts';
import { call } from '../../test/helpers/http.ts';
import { journey, type Demo } from '../../test/helpers/journey.ts';
import { runService, until, type Service } from '../../test/helpers/services.ts';
import { option, runBench, withDatabase } from '../lib/harness.ts';
import { machineLoad, showingLoad, treeCpuMs } from '../lib/probe.ts';
import { readFileSync } from 'node:fs';

const execFileAsync = promisify(execFile);
const seconds = option('seconds', 10);
const connections = option('connections', 16);

interface Load {
  count: number;
  rps: number;
  p50Us: number;
  p99Us: number;
  p999Us: number;
  statuses: Record<string, number>;
  errors: number;
  timeouts: number;
}
interface Job {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
}

/** One autocannon run from its own process (bench/path/load.ts). */
async function drive(job: Job, secs: number): Promise<Load> {
  const spec = JSON.stringify({ ...job, connections, seconds: secs });
  const { stdout } = await execFileAsync(
    process.execPath,
    ['--import', 'tsx', new URL('./load.ts', import.meta.url).pathname, spec],
    { maxBuffer: 256 * 1024 * 1024 },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Load;
}

const msOf = (us: number) => (us / 1000).toFixed(2).padStart(7);
const lineOf = (name: string, r: Load) =>
  `${name.padEnd(44)} p50 ${msOf(r.p50Us)} ms  p99 ${msOf(r.p99Us)} ms  p99.9 ${msOf(r.p999Us)} ms  ${r.rps.toFixed(0).padStart(6)} req/s  ${JSON.stringify(r.statuses)}${r.errors || r.timeouts ? `  errors ${r.errors} timeouts ${r.timeouts}` : ''}`;

/** The headers core receives for `req` once the edge allowed it (its own Check answer applied). */
async function edgeHeaders(
  address: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body = '',
): Promise<Record<string, string>> {
  const { Authorization } = authorizationPackage();
  const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    Check(
      r: CheckRequest,
      o: grpc.CallOptions,
      cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void,
    ): void;
  };
  const request: CheckRequest = {
    attributes: {
      source: { address: { socket_address: { address: '127.0.0.1', port_value: 40000 } } },
      request: {
        http: {
          id: randomUUID(),
          method,
          path,
          host: 'bench',
          scheme: 'http',
          protocol: 'HTTP/1.1',
          headers: { ':method': method, ':path': path, ...headers },
          raw_body: Buffer.from(body),
        },
      },
    },
  };
  try {
    const res = await new Promise<CheckResponse | undefined>((resolve, reject) =>
      client.Check(request, { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))),
    );
    if (!res?.ok_response)
      throw new Error(`the edge refused the bench's request: ${res?.denied_response?.body ?? 'no answer'}`);
    // As the gateway (and Envoy) forward it: the client's headers less those removed, plus those set.
    const forward: Record<string, string> = { ...headers };
    for (const name of res.ok_response.headers_to_remove ?? []) delete forward[name.toLowerCase()];
    for (const h of res.ok_response.headers ?? [])
      if (h.header?.key) forward[h.header.key.toLowerCase()] = h.header.value ?? '';
    return forward;
  } finally {
    client.close();
  }
}

/** The demo tenant seeded as `npm start` seeds it, and core, edge and gateway started as processes. */
async function startStack(db: Db, dir: string, url: string) {
  const dataDir = join(dir, 'data');
  await mkdir(dataDir, { recursive: true });
  const secret32 = () => randomBytes(32);
  const master = secret32();
  const seal = secret32();
  const challenge = secret32();
  // The demo tenant, its ledger and its core client, as `npm start` seeds them (minor units
  // from administration's currency table first, as core loads them before it serves).
  await loadLedgerCurrencies(db);
  await seedDemo(db, dataDir, {
    keys: new KeyStore(db, master, { apiKeySealKey: seal, challengeKeys: [challenge] }),
  });
  const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Demo;
  const ports = {
    core: await freePort(),
    authz: await freePort(),
    metrics: await freePort(),
    gateway: await freePort(),
  };
  const edgeSecret = randomBytes(32).toString('base64url');
  const shared = {
    MODE: 'development',
    DATABASE_URL: url,
    DATA_DIR: dataDir,
    EDGE_SHARED_SECRET: edgeSecret,
    CHALLENGE_KEY: challenge.toString('base64'),
    API_KEY_SEAL_KEY: seal.toString('base64'),
    LOG_LEVEL: 'warn',
  };
  const procs: Service[] = [
    runService('core', { ...shared, MASTER_KEY: master.toString('base64'), CORE_PORT: String(ports.core) }),
    runService('edge', {
      ...shared,
      AUTHZ_PORT: String(ports.authz),
      EDGE_METRICS_PORT: String(ports.metrics),
    }),
    runService('gateway', {
      MODE: 'development',
      LOG_LEVEL: 'warn',
      GATEWAY_PORT: String(ports.gateway),
      AUTHZ_ADDRESSES: `127.0.0.1:${ports.authz}`,
      CORE_ORIGINS: `http://127.0.0.1:${ports.core}`,
    }),
  ];
  return { dataDir, demo, ports, procs };
}
type Stack = Awaited<ReturnType<typeof startStack>>;

/** Core, the edge's metrics port and the gateway all answer ready. */
async function waitReady(stack: Stack, core: string, gw: string): Promise<void> {
  const outputs = () => stack.procs.map((p) => `--- ${p.kind}\n${p.output().slice(-2000)}`).join('\n');
  for (const origin of [core, `http://127.0.0.1:${stack.ports.metrics}`, gw]) {
    const path = origin === core || origin === gw ? '/v1/ready' : '/ready';
    await until(
      async () => ((await call(origin, 'GET', path)).status === 200 ? true : undefined),
      90_000,
      `${origin}${path} (${outputs()})`,
    );
  }
}

/** A customer's read and a core client's posting, each via the gateway and straight to core. */
async function jobsOf(db: Db, stack: Stack, core: string, gw: string): Promise<[string, Job][]> {
  const { demo, dataDir, ports } = stack;
  const j = journey(gw, dataDir, db, demo);
  const customer = await j.signUp('+254733100001');
  const token = await call(gw, 'POST', '/oauth2/token', {
    json: {
      grant_type: 'client_credentials',
      client_id: demo.coreClient.clientId,
      client_secret: demo.coreClient.clientSecret,
      scope: 'core:write',
    },
  });
  if (token.status !== 200) throw new Error(`core client token: ${token.status} ${token.text}`);
  const coreAuth = { authorization: `Bearer ${String(token.json.access_token)}` };
  const posting = JSON.stringify({
    currency: 'KES',
    entries: [
      { account_id: demo.settlementAccounts.KES, side: 'debit', amount: '0.01' },
      { account_id: customer.wallet, side: 'credit', amount: '0.01' },
    ],
  });
  const customerAuth = j.bearer(customer);
  const postingHeaders = {
    ...coreAuth,
    'content-type': 'application/json',
    'idempotency-key': randomUUID(),
  };
  const authz = `127.0.0.1:${ports.authz}`;
  return [
    ['GET /v1/accounts via gateway', { url: `${gw}/v1/accounts`, method: 'GET', headers: customerAuth }],
    [
      'GET /v1/accounts straight to core',
      {
        url: `${core}/v1/accounts`,
        method: 'GET',
        headers: await edgeHeaders(authz, 'GET', '/v1/accounts', customerAuth),
      },
    ],
    [
      'POST /v1/core/postings via gateway',
      { url: `${gw}/v1/core/postings`, method: 'POST', headers: postingHeaders, body: posting },
    ],
    [
      'POST /v1/core/postings straight to core',
      {
        url: `${core}/v1/core/postings`,
        method: 'POST',
        body: posting,
        headers: await edgeHeaders(authz, 'POST', '/v1/core/postings', postingHeaders, posting),
      },
    ],
  ];
}

/** Each request once before the load: a bench of refusals would measure nothing. */
async function checkJobsOnce(jobs: [string, Job][]): Promise<void> {
  for (const [name, job] of jobs) {
    const u = new URL(job.url);
    const r = await call(u.origin, job.method, u.pathname, {
      headers: { ...job.headers, 'idempotency-key': randomUUID() },
      ...(job.body ? { body: job.body } : {}),
    });
    if (r.status >= 300) throw new Error(`${name} answers ${r.status}: ${r.text.slice(0, 300)}`);
  }
}

/**
 * Each tier's CPU per request (issue 19's capacity model is built from these): the service
 * processes, and PostgreSQL's postmaster with every backend (the parent of ours).
 */
async function tiersOf(db: Db, procs: Service[]): Promise<[string, number[]][]> {
  const backend = (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
  const postmaster = Number(readFileSync(`/proc/${backend}/stat`, 'utf8').split(') ')[1]?.split(' ')[1] ?? 0);
  return [
    ...procs.map((p): [string, number[]] => [p.kind, [p.child.pid ?? 0]]),
    ['PostgreSQL', [postmaster]],
  ];
}

/** Every job under load after a warm-up, with each tier's CPU per served request. */
async function loadJobs(jobs: [string, Job][], tiers: [string, number[]][]): Promise<Load[]> {
  const results: Load[] = [];
  for (const [name, job] of jobs) {
    await drive(job, 2);
    const before = tiers.map(([, pids]) => treeCpuMs(pids));
    const r = await drive(job, seconds);
    const used = tiers.map(([, pids], i) => treeCpuMs(pids) - (before[i] ?? 0));
    results.push(r);
    process.stdout.write(`${lineOf(name, r)}   (${machineLoad()})\n`);
    const served = Math.max(
      1,
      Object.entries(r.statuses).reduce((a, [k, v]) => a + (k.startsWith('2') ? v : 0), 0),
    );
    process.stdout.write(
      `${' '.repeat(4)}CPU per request: ${tiers.map(([t], i) => `${t} ${Math.round(((used[i] ?? 0) * 1000) / served)} µs`).join(', ')} (10 ms jiffies; the load generator not counted)\n`,
    );
  }
  return results;
}

/** Via the gateway as a ratio to straight to core, for the read and the posting. */
function printOverhead(results: Load[]): void {
  process.stdout.write('edge + gateway overhead (via gateway ÷ straight to core):\n');
  for (const [i, what] of ['GET /v1/accounts', 'POST /v1/core/postings'].entries()) {
    const via = results[i * 2] as Load;
    const direct = results[i * 2 + 1] as Load;
    process.stdout.write(
      `  ${what.padEnd(26)} p50 ${(via.p50Us / direct.p50Us).toFixed(2)}x  p99 ${(via.p99Us / direct.p99Us).toFixed(2)}x  throughput ${(via.rps / direct.rps).toFixed(2)}x\n`,
    );
  }
}

async function measure(): Promise<void> {
  await withDatabase('path', async (db, dir, url) => {
    const stack = await startStack(db, dir, url);
    const core = `http://127.0.0.1:${stack.ports.core}`;
    const gw = `http://127.0.0.1:${stack.ports.gateway}`;
    try {
      await waitReady(stack, core, gw);
      const jobs = await jobsOf(db, stack, core, gw);
      await checkJobsOnce(jobs);
      process.stdout.write(
        `autocannon from its own process, ${connections} connections, ${seconds} s each after a 2 s warm-up; the dev gateway stands in for Envoy\n`,
      );
      const tiers = await tiersOf(db, stack.procs);
      printOverhead(await loadJobs(jobs, tiers));
    } finally {
      for (const p of stack.procs)
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
      await Promise.all(stack.procs.map((p) => p.exited));
    }
  });
}

runBench(() => showingLoad(measure));
