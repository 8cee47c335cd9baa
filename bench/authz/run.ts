/**
 * Edge authorization benchmark (issue: p50/p99/p99.9 at 1,000 req/s and the maximum sustained
 * rate; SPEC 8: decision p99 < 5 ms, token verification plus session check p99 < 2 ms).
 *
 *   npx tsx bench/authz/run.ts [--requests 10000] [--rps 1000]
 *
 * Starts an embedded PostgreSQL in a temporary directory, the real edge (policy bundle, cached
 * state, decision audit), and drives Check from a separate process with `ghz` using realistic
 * CheckRequests: a transfer with an AAL 2 JWT, a masked read, and a denied cross-tenant call.
 * For comparison it runs OPA itself (`opa run --server`, the same Rego and data) on the same
 * decision inputs over its REST data API. opa-envoy-plugin is not obtainable from this
 * machine's Go module proxy, so OPA's own server stands in for it; the ratio compares policy
 * engines plus transport, not identical gRPC stacks. Prints; asserts nothing.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { startEmbedded } from '../../core/db/embedded.ts';
import { migrate } from '../../core/db/migrate.ts';
import { createDb } from '../../core/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../core/platform/log.ts';
import { createMetrics } from '../../core/platform/metrics.ts';
import { AuditWriter } from '../../edge/audit-writer.ts';
import { authenticate } from '../../edge/auth/principal.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../edge/policy/bundle.ts';
import { PolicyStore } from '../../edge/policy/store.ts';
import { envoyProtoIncludeDirs } from '../../edge/proto.ts';
import { buildRouteTable, edgeRoutes, type EdgeRoute } from '../../edge/routes.ts';
import { bindEdge, createEdgeServer } from '../../edge/server.ts';
import { EdgeState } from '../../edge/state/store.ts';
import type { CheckRequest } from '../../edge/types.ts';
import { freePort } from '../../lib/net.ts';
import { findOpa } from '../../policy/opa.ts';
import { policyDir } from '../../policy/build.ts';

const execFileAsync = promisify(execFile);

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const requests = arg('requests', 10_000);
const rps = arg('rps', 1000);

const benchRoutes: EdgeRoute[] = [
  { method: 'GET', template: '/v1/transactions', purpose: 'customer.account.view', resource: 'transaction', action: 'transaction.read', credential: 'customer' },
  { method: 'POST', template: '/v1/transfers', purpose: 'customer.transact', resource: 'transaction', action: 'transfer.create', credential: 'customer' },
];

function ghzPath(): string {
  const gopath = execFileSync('go', ['env', 'GOPATH']).toString().trim();
  return join(gopath, 'bin', 'ghz');
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

const ms = (ns: number) => (ns / 1e6).toFixed(3);

interface GhzReport { rps: number; count: number; latencyDistribution: { percentage: number; latency: number }[]; statusCodeDistribution: Record<string, number> }

async function ghz(address: string, data: CheckRequest, opts: { rps: number; n: number; c: number }, dir: string): Promise<GhzReport> {
  const file = join(dir, `req-${randomUUID()}.json`);
  const raw = data.attributes?.request?.http?.raw_body;
  const json = JSON.parse(JSON.stringify(data, (k, v: unknown) => (k === 'raw_body' ? undefined : v))) as CheckRequest;
  if (raw && json.attributes?.request?.http) (json.attributes.request.http as Record<string, unknown>).raw_body = Buffer.from(raw).toString('base64');
  await writeFile(file, JSON.stringify(json));
  const args = [
    '--insecure', '--proto', 'envoy/service/auth/v3/external_auth.proto', '--import-paths', envoyProtoIncludeDirs.join(','),
    '--call', 'envoy.service.auth.v3.Authorization.Check', '-D', file, '-n', String(opts.n), '-c', String(opts.c),
    '--connections', '2', '--format', 'json', '--timeout', '1s',
  ];
  if (opts.rps > 0) args.push('--rps', String(opts.rps));
  // Asynchronously: this process serves the Check calls ghz makes.
  const { stdout: out } = await execFileAsync(ghzPath(), [...args, address], { maxBuffer: 64 * 1024 * 1024 });
  const report = JSON.parse(out) as GhzReport & { errorDistribution?: Record<string, number> };
  if (!report.latencyDistribution) throw new Error(`ghz reported no latencies: ${JSON.stringify(report.errorDistribution ?? report.statusCodeDistribution)}`);
  return report;
}

function line(name: string, r: GhzReport): string {
  const at = (p: number) => r.latencyDistribution.find((d) => d.percentage === p)?.latency ?? Number.NaN;
  return `${name.padEnd(30)} p50 ${ms(at(50)).padStart(7)} ms  p99 ${ms(at(99)).padStart(7)} ms  p99.9 ${ms(at(99.9)).padStart(7)} ms  ${r.rps.toFixed(0).padStart(6)} req/s  ${JSON.stringify(r.statusCodeDistribution)}`;
}

async function opaBaseline(inputs: unknown[], n: number, dir: string): Promise<{ p50: number; p99: number; p999: number; rps: number }> {
  const opa = findOpa();
  if (!opa) throw new Error('opa CLI not found');
  const port = await freePort();
  // The same Rego and registry data, plus the meta document the edge gives the WASM build.
  await writeFile(join(dir, 'meta.json'), JSON.stringify({ meta: { policy_version: 'opa-server' } }));
  const child = spawn(opa, ['run', '--server', '--log-level', 'error', '--addr', `127.0.0.1:${port}`, join(policyDir, 'src'), join(policyDir, 'data'), join(dir, 'meta.json')], { stdio: 'ignore' });
  try {
    const pool = new Pool(`http://127.0.0.1:${port}`, { connections: 16 });
    for (let i = 0; i < 100; i++) {
      try {
        await (await pool.request({ path: '/health', method: 'GET' })).body.dump();
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const bodies = inputs.map((input) => JSON.stringify({ input }));
    const lat: number[] = [];
    const started = process.hrtime.bigint();
    let next = 0;
    const worker = async () => {
      while (next < n) {
        const i = next++;
        const t0 = process.hrtime.bigint();
        const res = await pool.request({ path: '/v1/data/payments/authz/decision', method: 'POST', body: bodies[i % bodies.length], headers: { 'content-type': 'application/json' } });
        await res.body.dump();
        lat.push(Number(process.hrtime.bigint() - t0));
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    const elapsedS = Number(process.hrtime.bigint() - started) / 1e9;
    await pool.close();
    lat.sort((a, b) => a - b);
    return { p50: pct(lat, 50), p99: pct(lat, 99), p999: pct(lat, 99.9), rps: n / elapsedS };
  } finally {
    child.kill('SIGTERM');
  }
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-authz-'));
  const pg = await startEmbedded({ dir: join(dir, 'pg'), port: await freePort() });
  const log = createLogger('silent');
  const db = createDb({ connectionString: pg.url(), metrics: createMetrics(), log, max: 20 });
  try {
    await migrate(db.pool);
    for (const t of ['t1', 't2']) await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [t]);
    const keys = new KeyStore(db, randomBytes(32));
    const customerId = randomUUID();
    const sid = randomUUID();
    await db.query(`INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, 't1', '+254700000001', now())`, [customerId]);
    await db.query(`INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, ip, created_at, last_seen) VALUES ($1, 't1', 'customer', $2, 'j', 2, '127.0.0.1', now(), now())`, [sid, customerId]);
    await db.query(`INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id) VALUES ('t1', 'customer', $1, 'member', 'tenant', 't1')`, [customerId]);
    const token = await keys.sign('t1', { sub: customerId, sid, aal: 2, amr: ['pin', 'otp'], jti: randomUUID(), aud: 'payments-api' }, { expiresInS: 3600, typ: 'at+jwt' });

    const state = new EdgeState(db, keys, log);
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    const audit = new AuditWriter(db, log);
    audit.start();
    const decide = createDecider({ state, policies, audit, risk: new RiskEngine(), log, edgeSecret: 'bench' });
    const server = createEdgeServer({ log, decide, resolve: buildRouteTable([...edgeRoutes, ...benchRoutes]) });
    const address = `127.0.0.1:${await bindEdge(server, 0)}`;

    const req = (method: string, path: string, body?: string): CheckRequest => ({
      attributes: {
        source: { address: { socket_address: { address: '127.0.0.1', port_value: 40000 } } },
        request: { http: {
          id: 'bench', method, path, host: 'api.example', scheme: 'https', protocol: 'HTTP/2',
          headers: { ':method': method, ':path': path, ':authority': 'api.example', authorization: `Bearer ${token}`, 'content-type': 'application/json', 'user-agent': 'bench' },
          raw_body: Buffer.from(body ?? ''), size: String(body?.length ?? 0),
        } },
      },
    });
    const scenarios: [string, CheckRequest][] = [
      ['transfer, AAL 2 JWT (allow)', req('POST', '/v1/transfers', JSON.stringify({ amount: '250.00', currency: 'KES', beneficiaryId: 'b1', reference: 'r1' }))],
      ['masked read (allow)', req('GET', '/v1/transactions?limit=20')],
      ['cross-tenant read (deny)', req('GET', '/v1/transactions?tenantId=t2')],
    ];

    process.stdout.write(`edge Check via ghz, ${requests} requests each at ${rps} req/s, 16 concurrent\n`);
    const ours: GhzReport[] = [];
    for (const [name, r] of scenarios) {
      await ghz(address, r, { rps: 0, n: 500, c: 4 }, dir); // warm caches and JIT
      const report = await ghz(address, r, { rps, n: requests, c: 16 }, dir);
      ours.push(report);
      process.stdout.write(`${line(name, report)}\n`);
    }
    const max = await ghz(address, scenarios[0]?.[1] as CheckRequest, { rps: 0, n: requests, c: 32 }, dir);
    process.stdout.write(`${line('max sustained (transfer, c=32)', max)}\n`);

    // In-process: token verification + session check, and policy evaluation alone.
    const view = viewOf(scenarios[1]?.[1] as CheckRequest);
    const authLat: number[] = [];
    for (let i = 0; i < 5000; i++) {
      const t0 = process.hrtime.bigint();
      await authenticate('customer', view, state, (id) => state.tenant(id), Date.now());
      authLat.push(Number(process.hrtime.bigint() - t0));
    }
    authLat.sort((a, b) => a - b);
    process.stdout.write(`token verification + session check (in process)  p50 ${ms(pct(authLat, 50))} ms  p99 ${ms(pct(authLat, 99))} ms  (target p99 < 2 ms)\n`);
    const input = {
      tenant: { id: 't1', status: 'ACTIVE', security: {} },
      subject: { id: customerId, type: 'customer', aal: 2, tuples: [{ relation: 'member', object_ns: 'tenant', object_id: 't1', caveat: {} }], stepup_age_s: 10 },
      resource: { type: 'transaction', tenant_id: 't1' }, action: 'transfer.create', purpose: 'customer.transact',
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
    process.stdout.write(`policy evaluation alone (WASM, in process)        p50 ${ms(pct(evalLat, 50))} ms  p99 ${ms(pct(evalLat, 99))} ms  (target decision p99 < 5 ms)\n`);

    const o = await opaBaseline([input, { ...input, resource: { type: 'transaction', tenant_id: 't2' } }], requests, dir);
    const ourTransfer = ours[0];
    const at = (r: GhzReport | undefined, p: number) => r?.latencyDistribution.find((d) => d.percentage === p)?.latency ?? Number.NaN;
    process.stdout.write(`OPA server, same Rego (REST data API, 16 concurrent, unthrottled)  p50 ${ms(o.p50)} ms  p99 ${ms(o.p99)} ms  p99.9 ${ms(o.p999)} ms  ${o.rps.toFixed(0)} req/s\n`);
    process.stdout.write(`ratio ours/OPA (transfer scenario): p50 ${(at(ourTransfer, 50) / o.p50).toFixed(2)}x  p99 ${(at(ourTransfer, 99) / o.p99).toFixed(2)}x; max rate ${(max.rps / o.rps).toFixed(2)}x\n`);
    process.stdout.write('note: ours includes JWT verification, session/tuple lookups, risk, audit; OPA only evaluates the policy\n');
    server.forceShutdown();
    await audit.stop();
    await state.stop();
  } finally {
    await db.close();
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
