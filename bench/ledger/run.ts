/**
 * Ledger bench (issue 5): two-leg postings per second with fsync on, 16 concurrent clients,
 * uniform over 10,000 accounts and onto one hot credit account, p50/p99 latency, the batched
 * write path beside a naive one-transaction-per-posting baseline, in the same run.
 * `npx tsx bench/ledger/run.ts` (env: LEDGER_BENCH_SECONDS, LEDGER_BENCH_CLIENTS, LEDGER_BENCH_INFLIGHT).
 * Calls the ledger service in-process (no HTTP, no JWT): it measures the ledger, not the pipeline.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startEmbedded } from '../../core/db/embedded.ts';
import { migrate } from '../../core/db/migrate.ts';
import { createDb, type Db } from '../../core/db/pool.ts';
import { createLogger } from '../../core/platform/log.ts';
import { createMetrics } from '../../core/platform/metrics.ts';
import { freePort } from '../../lib/net.ts';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import { openAccount } from '../../core/ledger/accounts.ts';
import { Ledger, type WriteCtx } from '../../core/ledger/service.ts';
import { naivePost } from './naive.ts';

const seconds = Number(process.env.LEDGER_BENCH_SECONDS ?? 8);
const clients = Number(process.env.LEDGER_BENCH_CLIENTS ?? 16);
const inFlight = Number(process.env.LEDGER_BENCH_INFLIGHT ?? 1);
const accountCount = 10_000;
const tenant = 'bench';

interface Result { name: string; ops: number; failed: number; perS: number; p50: number; p99: number }

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0;
}

async function drive(name: string, op: (i: number) => Promise<boolean>): Promise<Result> {
  const lat: number[] = [];
  let failed = 0;
  let seq = 0;
  const end = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      const ok = await op(seq++);
      lat.push(performance.now() - t0);
      if (!ok) failed++;
    }
  }));
  const elapsed = (performance.now() - started) / 1000;
  lat.sort((a, b) => a - b);
  return { name, ops: lat.length, failed, perS: lat.length / elapsed, p50: pct(lat, 0.5), p99: pct(lat, 0.99) };
}

async function setup(db: Db): Promise<{ wallets: string[]; hot: string }> {
  await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, 'Bench', 'KE', 'KES')`, [tenant]);
  await ensureTenantLedger(db, tenant);
  const settlement = await db.tx((c) => openAccount(c, { tenantId: tenant, ownerType: 'platform', ownerId: 's', productCode: 'SETTLEMENT', currency: 'KES', viaApi: false }, Date.now()));
  const hot = await db.tx((c) => openAccount(c, { tenantId: tenant, ownerType: 'merchant', ownerId: 'hot', productCode: 'MERCHANT', currency: 'KES', viaApi: false }, Date.now()));
  const { rows } = await db.query<{ id: string }>(
    `WITH a AS (INSERT INTO ledger_accounts (tenant_id, id, owner_type, owner_id, product_code, currency, debits_must_not_exceed_credits)
       SELECT $1, uuidv7(), 'customer', 'c' || g, 'WALLET_MAIN', 'KES', true FROM generate_series(1, $2) g RETURNING id)
     INSERT INTO ledger_balances (tenant_id, account_id, currency, debits_must_not_exceed_credits) SELECT $1, id, 'KES', true FROM a RETURNING account_id AS id`,
    [tenant, accountCount]);
  const wallets = rows.map((r) => r.id);
  // Fund every wallet with one posting of 64 legs per 63 wallets (set-based, outside the timing).
  for (let i = 0; i < wallets.length; i += 63) {
    const chunk = wallets.slice(i, i + 63);
    await db.query(`SELECT ledger_apply($1::jsonb)`, [JSON.stringify([{
      op: 'post', tenant, id: crypto.randomUUID(), transaction_id: crypto.randomUUID(), type: 'FUNDING', currency: 'KES', description: null, metadata: {},
      entries: [{ account_id: settlement.id, side: 'debit', amount: String(chunk.length * 1_000_000), currency: 'KES' },
        ...chunk.map((w) => ({ account_id: w, side: 'credit', amount: '1000000', currency: 'KES' }))],
    }])]);
  }
  return { wallets, hot: hot.id };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ledger-bench-'));
  const pg = await startEmbedded({ dir: join(dir, 'pg'), port: await freePort() });
  const log = createLogger('silent');
  const db = createDb({ connectionString: pg.url('postgres'), metrics: createMetrics(), log, max: 20 });
  try {
    const fsync = (await db.query<{ fsync: string; sc: string }>(`SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sc`)).rows[0];
    await migrate(db.pool);
    const { wallets, hot } = await setup(db);
    const ledger = new Ledger({ db, log, now: Date.now, inFlightBatches: inFlight });
    const run = randomBytes(4).toString('hex');
    const pick = () => wallets[Math.floor(Math.random() * wallets.length)] as string;
    const ctx = (i: number, body: unknown): WriteCtx => ({
      principal: { tenantId: tenant, clientId: 'bench', scopes: new Set(['core:write']) }, requestId: `r${i}`,
      key: `${run}-${i}-${Math.random().toString(36).slice(2, 8)}`, method: 'POST', path: '/v1/core/postings', body,
    });
    const batched = (to: () => string) => async (i: number) => {
      const from = pick();
      let dest = to();
      if (dest === from) dest = hot;
      const body = { currency: 'KES', entries: [{ account_id: from, side: 'debit' as const, amount: '0.01' }, { account_id: dest, side: 'credit' as const, amount: '0.01' }] };
      const r = await ledger.post(ctx(i, body), body);
      return r.status === 201;
    };
    const naive = (to: () => string) => async (i: number) => {
      const from = pick();
      let dest = to();
      if (dest === from) dest = hot;
      return naivePost(db, tenant, from, dest, '0.010000', `n${run}-${i}-${Math.random().toString(36).slice(2, 8)}`);
    };
    await drive('warm-up', batched(pick));
    const results: Result[] = [];
    results.push(await drive('batched uniform', batched(pick)));
    results.push(await drive('naive uniform', naive(pick)));
    results.push(await drive('batched hot', batched(() => hot)));
    results.push(await drive('naive hot', naive(() => hot)));
    const fmt = (n: number, d = 1) => n.toFixed(d).padStart(9);
    process.stdout.write(`\nledger bench: ${clients} clients, ${seconds}s per run, ${accountCount} accounts, fsync=${fsync?.fsync}, synchronous_commit=${fsync?.sc}, in-flight batches=${inFlight}\n`);
    process.stdout.write(`${'scenario'.padEnd(18)}${'postings/s'.padStart(11)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'ops'.padStart(9)}${'failed'.padStart(8)}\n`);
    for (const r of results) process.stdout.write(`${r.name.padEnd(18)}${fmt(r.perS, 0).padStart(11)}${fmt(r.p50, 2)}${fmt(r.p99, 2)}${String(r.ops).padStart(9)}${String(r.failed).padStart(8)}\n`);
    const by = (n: string) => results.find((r) => r.name === n)?.perS ?? 0;
    process.stdout.write(`ratio batched/naive: uniform ${(by('batched uniform') / by('naive uniform')).toFixed(1)}x, hot ${(by('batched hot') / by('naive hot')).toFixed(1)}x\n`);
    const { rows } = await db.query<{ d: string; c: string }>(`SELECT sum(amount) FILTER (WHERE side = 'debit')::text AS d, sum(amount) FILTER (WHERE side = 'credit')::text AS c FROM ledger_entries`);
    process.stdout.write(`check: total debits ${rows[0]?.d} = total credits ${rows[0]?.c}\n`);
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
