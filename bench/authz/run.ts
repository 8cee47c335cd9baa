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
 */
import { execFile, execFileSync } from 'node:child_process';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { promisify } from 'node:util';
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { AuditThread, AuditWriter, failClosedReserve, maxQueued } from '../../edge/audit-writer.ts';
import { authenticate } from '../../edge/auth/principal.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { authorizationPackage, envoyProtoIncludeDirs } from '../../edge/proto.ts';
import { buildRouteTable, edgeRoutes } from '../../edge/routes.ts';
import { bindEdge, createEdgeServer } from '../../edge/server.ts';
import { EdgeState } from '../../edge/state/store.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import * as grpc from '@grpc/grpc-js';
import { origOf } from '../../shared/challenge.ts';
import { option, percentile, runBench, withDatabase } from '../lib/harness.ts';
import { ensureOpaEnvoyPlugin, opaEnvoyPluginVersion, routesForRego, startOpaEnvoyPlugin } from './opa-envoy.ts';

const execFileAsync = promisify(execFile);

const requests = option('requests', 10_000);
const rps = option('rps', 1000);


function ghzPath(): string {
  const gopath = execFileSync('go', ['env', 'GOPATH']).toString().trim();
  return join(gopath, 'bin', 'ghz');
}

const ms = (ns: number) => (ns / 1e6).toFixed(3);

interface GhzReport { rps: number; count: number; latencyDistribution: { percentage: number; latency: number }[]; statusCodeDistribution: Record<string, number>; details?: { latency: number }[] }

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

// ghz's summary stops at p99; the per-call details give p99.9.
const at = (r: GhzReport, p: number) => r.latencyDistribution.find((d) => d.percentage === p)?.latency ?? percentile((r.details ?? []).map((d) => d.latency).sort((x, y) => x - y), p);

function line(name: string, r: GhzReport, offered = 0): string {
  const saturated = offered > 0 && r.rps < offered * 0.95 ? '  (below the offered rate: saturated)' : '';
  return `${name.padEnd(30)} p50 ${ms(at(r, 50)).padStart(7)} ms  p99 ${ms(at(r, 99)).padStart(7)} ms  p99.9 ${ms(at(r, 99.9)).padStart(7)} ms  ${r.rps.toFixed(0).padStart(6)} req/s  ${JSON.stringify(r.statusCodeDistribution)}${saturated}`;
}

type CheckClient = grpc.Client & { Check(r: CheckRequest, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void): void };

/** One Check, summarised: `allow`, or `deny <HTTP status> <code>`. */
async function outcomeOf(address: string, r: CheckRequest): Promise<string> {
  const { Authorization } = authorizationPackage();
  const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as CheckClient;
  try {
    const res = await new Promise<CheckResponse | undefined>((resolve, reject) => client.Check(r, { deadline: Date.now() + 2000 }, (e, out) => (e ? reject(e) : resolve(out))));
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


async function main(): Promise<void> {
  const log = createLogger('silent');
  await withDatabase('authz', async (db, dir, url) => {
    for (const t of ['t1', 't2']) await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [t]);
    const keys = new KeyStore(db, randomBytes(32));
    const customerId = randomUUID();
    const sid = randomUUID();
    await db.query(`INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, 't1', '+254700000001', now())`, [customerId]);
    await db.query(`INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, ip, created_at, last_seen) VALUES ($1, 't1', 'customer', $2, 'j', 2, '127.0.0.1', now(), now())`, [sid, customerId]);
    await db.query(`INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id) VALUES ('t1', 'customer', $1, 'member', 'tenant', 't1')`, [customerId]);
    const token = await keys.sign('t1', { sub: customerId, sid, aal: 2, amr: ['pin', 'otp'], jti: randomUUID(), aud: 'payments-api' }, { expiresInS: 3600, typ: 'at+jwt' });

    const state = new EdgeState(db, new TokenVerifier(db), keys.apiKeySecrets, log);
    await state.start();
    const policies = new PolicyStore(await loadTrustedKeys());
    await policies.load(defaultBundleDir);
    // As in production (edge/main.ts): the decision audit is written by its own thread.
    const audit = new AuditWriter(db, log, maxQueued, failClosedReserve, new AuditThread(url));
    audit.start();
    const decide = createDecider({ state, challenges: keys.challenges, policies, audit, risk: new RiskEngine(), log, edgeSecret: 'bench' });
    const server = createEdgeServer({ log, decide, resolve: buildRouteTable(edgeRoutes) });
    const address = `127.0.0.1:${await bindEdge(server, 0)}`;

    // The transfer's AAL 2 token is the one a step-up issued for that very request (SPEC 4.3 rule 3).
    const transferBody = JSON.stringify({ amount: '250.00', currency: 'KES', beneficiaryId: 'b1', reference: 'r1' });
    const transferToken = await keys.sign('t1', { sub: customerId, sid, aal: 2, amr: ['pin', 'device'], jti: randomUUID(), aud: 'payments-api', orig: origOf('POST', '/v1/transfers', transferBody) }, { expiresInS: 3600, typ: 'at+jwt' });
    const req = (method: string, path: string, body?: string, bearer = token): CheckRequest => ({
      attributes: {
        source: { address: { socket_address: { address: '127.0.0.1', port_value: 40000 } } },
        request: { http: {
          id: 'bench', method, path, host: 'api.example', scheme: 'https', protocol: 'HTTP/2',
          headers: { ':method': method, ':path': path, ':authority': 'api.example', authorization: `Bearer ${bearer}`, 'content-type': 'application/json', 'user-agent': 'bench' },
          raw_body: Buffer.from(body ?? ''), size: String(body?.length ?? 0),
        } },
      },
    });
    const scenarios: [string, CheckRequest][] = [
      ['transfer, AAL 2 JWT (allow)', req('POST', '/v1/transfers', transferBody, transferToken)],
      ['masked read (allow)', req('GET', '/v1/transactions?limit=20')],
      ['cross-tenant read (deny)', req('GET', '/v1/transactions?tenantId=t2')],
    ];

    // Each scenario's decision, checked once before the load (ghz sees only the gRPC status).
    const outcomes: string[] = [];
    for (const [name, r] of scenarios) {
      outcomes.push(await outcomeOf(address, r));
      process.stdout.write(`decision for "${name}": ${outcomes.at(-1)}\n`);
    }
    process.stdout.write(`edge Check via ghz, ${requests} requests each at ${rps} req/s, 16 concurrent\n`);
    const ours: GhzReport[] = [];
    for (const [name, r] of scenarios) {
      await ghz(address, r, { rps: 0, n: 2000, c: 16 }, dir); // warm caches, JIT and heap
      const report = await ghz(address, r, { rps, n: requests, c: 16 }, dir);
      ours.push(report);
      process.stdout.write(`${line(name, report, rps)}\n`);
    }
    const max = await ghz(address, scenarios[0]?.[1] as CheckRequest, { rps: 0, n: requests, c: 32 }, dir);
    process.stdout.write(`${line('max sustained (transfer, c=32)', max)}\n`);
    // The machine's floor: the same gRPC server and request with a decision that does nothing
    // (no token, state, policy or audit), under the same load, sharing the same cores with ghz.
    const floorServer = createEdgeServer({ log, decide: () => ({ allow: true, status: 200 }), resolve: buildRouteTable(edgeRoutes) });
    const floor = await ghz(`127.0.0.1:${await bindEdge(floorServer, 0)}`, scenarios[1]?.[1] as CheckRequest, { rps, n: requests, c: 16 }, dir);
    floorServer.forceShutdown();
    process.stdout.write(`${line('floor: empty decision', floor, rps)}\n`);

    // In-process: token verification + session check, and policy evaluation alone.
    const view = viewOf(scenarios[1]?.[1] as CheckRequest);
    const authLat: number[] = [];
    for (let i = 0; i < 5000; i++) {
      const t0 = process.hrtime.bigint();
      await authenticate('customer', view, state, (id) => state.tenant(id), Date.now());
      authLat.push(Number(process.hrtime.bigint() - t0));
    }
    authLat.sort((a, b) => a - b);
    process.stdout.write(`token verification + session check (in process)  p50 ${ms(percentile(authLat, 50))} ms  p99 ${ms(percentile(authLat, 99))} ms  (target p99 < 2 ms)\n`);
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
    process.stdout.write(`policy evaluation alone (WASM, in process)        p50 ${ms(percentile(evalLat, 50))} ms  p99 ${ms(percentile(evalLat, 99))} ms  (target decision p99 < 5 ms)\n`);

    // opa-envoy-plugin: the same Rego, requests and state (the rows above, as data).
    const plugin = await startOpaEnvoyPlugin(ensureOpaEnvoyPlugin((l) => process.stdout.write(`${l}\n`)), dir, {
      routes: routesForRego(edgeRoutes),
      jwks: Object.fromEntries(await Promise.all(['t1', 't2'].map(async (t) => [t, JSON.stringify(await keys.jwks(t))] as const))),
      tenants: Object.fromEntries(await Promise.all(['t1', 't2'].map(async (t) => {
        const row = await state.tenant(t);
        return [t, { status: row?.status ?? 'UNKNOWN', security: row?.security ?? {} }] as const;
      }))),
      sessions: { [sid]: { tenant_id: 't1', subject_type: 'customer', subject_id: customerId, revoked: false, last_seen_ns: Date.now() * 1e6 } },
      tuples: { [customerId]: await state.tuplesOf('customer', customerId) },
    });
    try {
      for (const [i, [name, r]] of scenarios.entries()) {
        const theirs = await outcomeOf(plugin.grpcAddress, r);
        process.stdout.write(`opa-envoy-plugin decision for "${name}": ${theirs}\n`);
        if (theirs !== outcomes[i]) throw new Error(`opa-envoy-plugin decides "${theirs}" where the edge decides "${outcomes[i]}": the comparison would not be like for like`);
      }
      process.stdout.write(`opa-envoy-plugin ${opaEnvoyPluginVersion} via ghz, same requests and rates\n`);
      const theirs: GhzReport[] = [];
      for (const [name, r] of scenarios) {
        await ghz(plugin.grpcAddress, r, { rps: 0, n: 2000, c: 16 }, dir);
        const report = await ghz(plugin.grpcAddress, r, { rps, n: requests, c: 16 }, dir);
        theirs.push(report);
        process.stdout.write(`${line(name, report, rps)}\n`);
      }
      const theirMax = await ghz(plugin.grpcAddress, scenarios[0]?.[1] as CheckRequest, { rps: 0, n: requests, c: 32 }, dir);
      process.stdout.write(`${line('max sustained (transfer, c=32)', theirMax)}\n`);
      process.stdout.write('ours as a ratio to opa-envoy-plugin (below 1 = faster):\n');
      for (const [i, [name]] of scenarios.entries()) {
        const o = ours[i] as GhzReport;
        const t = theirs[i] as GhzReport;
        process.stdout.write(`  ${name.padEnd(30)} p50 ${(at(o, 50) / at(t, 50)).toFixed(2)}x  p99 ${(at(o, 99) / at(t, 99)).toFixed(2)}x  p99.9 ${(at(o, 99.9) / at(t, 99.9)).toFixed(2)}x\n`);
      }
      process.stdout.write(`  max sustained rate ${(max.rps / theirMax.rps).toFixed(2)}x (above 1 = more)\n`);
      process.stdout.write('note: the plugin reads session, tuples and keys from data loaded at start; the edge also keeps them fresh by LISTEN/NOTIFY, assesses risk, and audits every decision\n');
    } finally {
      plugin.stop();
    }
    server.forceShutdown();
    await audit.stop();
    await state.stop();
  });
}

runBench(main);
