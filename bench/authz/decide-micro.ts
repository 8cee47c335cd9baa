/**
 * The edge's decision in process, without gRPC: CPU per call of the decide function alone for
 * the three scenarios of run.ts, with the audit on its own thread as in production, and with
 * the audit replaced by nothing (what the audit costs the main thread).
 *
 *   npx tsx bench/authz/decide-micro.ts [--calls 20000]
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { AuditThread, AuditWriter, failClosedReserve, maxQueued } from '../../edge/audit-writer.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider } from '../../edge/authz.ts';
import { viewOf } from '../../edge/check.ts';
import { buildRouteTable, edgeRoutes } from '../../edge/routes.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import type { CheckRequest } from '../../edge/types.ts';
import { origOf } from '../../shared/challenge.ts';
import { option, runBench, withDatabase } from '../lib/harness.ts';
import { showingLoad } from '../lib/probe.ts';

const calls = option('calls', 20_000);

async function measure(): Promise<void> {
  const log = createLogger('silent');
  await withDatabase('decide', async (db, _dir, url) => {
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
    const threaded = new AuditWriter(db, log, maxQueued, failClosedReserve, new AuditThread(url));
    threaded.start();
    const none = { overloaded: () => false, push: () => undefined, pushFailClosed: () => undefined, pending: () => 0 } as unknown as AuditWriter;
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
    const routes = buildRouteTable(edgeRoutes);
    for (const [auditName, audit] of [['audit thread', threaded], ['no audit', none]] as const) {
      const decide = createDecider({ state, challenges: keys.challenges, policies, audit, risk: new RiskEngine(), log, edgeSecret: 'bench' });
      for (const [name, r] of scenarios) {
        const once = async () => {
          const view = viewOf(r);
          return decide(view, routes(view.method, view.path));
        };
        for (let i = 0; i < 2000; i++) await once();
        const cpu = process.cpuUsage();
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < calls; i++) {
          // The audit thread writes at its own pace: wait for it rather than overflow its queue.
          while (audit.pending() > 1000) await new Promise((res) => setTimeout(res, 1));
          await once();
        }
        const wall = Number(process.hrtime.bigint() - t0) / 1e3 / calls;
        // The audit thread's share: until it has written everything queued.
        while (audit.pending() > 0) await new Promise((res) => setTimeout(res, 5));
        await audit.flush();
        const used = process.cpuUsage(cpu);
        process.stdout.write(`${auditName.padEnd(13)} ${name.padEnd(30)} ${wall.toFixed(1).padStart(7)} µs wall/call (with waits for the audit)  ${((used.user + used.system) / calls).toFixed(1).padStart(7)} µs CPU/call (all threads)\n`);
        await new Promise((res) => setTimeout(res, 500));
      }
    }
    await threaded.stop();
    await state.stop();
  });
}

runBench(() => showingLoad(measure));
