/**
 * Ledger bench (issue 5): two-leg postings per second with fsync on, 16 concurrent clients,
 * uniform over 10,000 accounts and onto one hot credit account, p50/p99 latency, the batched
 * write path beside a naive one-transaction-per-posting baseline, in the same run.
 * `npx tsx bench/ledger/run.ts` (env: LEDGER_BENCH_SECONDS, LEDGER_BENCH_CLIENTS, LEDGER_BENCH_INFLIGHT,
 * LEDGER_BENCH_WINDOW_MS, LEDGER_BENCH_MAX_BATCH: the most commands one batch takes).
 * Calls the ledger service in-process (no HTTP, no JWT): it measures the ledger, not the pipeline.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startEmbedded } from '../../core/db/embedded.ts';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { migrate } from '../../core/db/migrate.ts';
import { createDb } from '../../shared/db/pool.ts';
import { defaultBatchWindowMs, defaultInFlightBatches } from '../../core/ledger/batcher.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freePort } from '../../shared/net.ts';
import { showingLoad } from '../lib/probe.ts';
import { Ledger, type WriteCtx } from '../../core/ledger/service.ts';
import { naivePost } from './naive.ts';
import { benchAccounts as accountCount, benchTenant as tenant, setupBench } from './setup.ts';

const seconds = Number(process.env.LEDGER_BENCH_SECONDS ?? 8);
const clients = Number(process.env.LEDGER_BENCH_CLIENTS ?? 16);
const inFlight = process.env.LEDGER_BENCH_INFLIGHT
  ? Number(process.env.LEDGER_BENCH_INFLIGHT)
  : defaultInFlightBatches;
const maxBatch = process.env.LEDGER_BENCH_MAX_BATCH ? Number(process.env.LEDGER_BENCH_MAX_BATCH) : undefined;
const windowMs = process.env.LEDGER_BENCH_WINDOW_MS
  ? Number(process.env.LEDGER_BENCH_WINDOW_MS)
  : defaultBatchWindowMs;

interface Result {
  name: string;
  ops: number;
  failed: number;
  perS: number;
  p50: number;
  p99: number;
  batch: number | undefined;
  nodeCpu: number;
}
interface BatchStats {
  batches: number;
  commands: number;
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0;
}

async function drive(name: string, op: (i: number) => Promise<boolean>, stats?: BatchStats): Promise<Result> {
  const b0 = stats ? { ...stats } : undefined;
  const cpu0 = process.cpuUsage();
  const lat: number[] = [];
  let failed = 0;
  let seq = 0;
  const end = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) {
        const t0 = performance.now();
        const ok = await op(seq++);
        lat.push(performance.now() - t0);
        if (!ok) failed++;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  lat.sort((a, b) => a - b);
  const batch =
    stats && b0 ? (stats.commands - b0.commands) / Math.max(1, stats.batches - b0.batches) : undefined;
  const used = process.cpuUsage(cpu0);
  return {
    name,
    ops: lat.length,
    failed,
    perS: lat.length / elapsed,
    p50: pct(lat, 0.5),
    p99: pct(lat, 0.99),
    batch,
    nodeCpu: (used.user + used.system) / 1e4 / elapsed,
  };
}

/** The runs as a table, with the settings they ran under and the batched/naive ratios. */
function printResults(results: Result[], fsync: { fsync: string; sc: string } | undefined): void {
  const fmt = (n: number, d = 1) => n.toFixed(d).padStart(9);
  process.stdout.write(
    `\nledger bench: ${clients} clients, ${seconds}s per run, ${accountCount} accounts, fsync=${fsync?.fsync}, synchronous_commit=${fsync?.sc}, in-flight batches=${inFlight}, batch window=${windowMs}ms, max batch=${maxBatch ?? 'default'}\n`,
  );
  process.stdout.write(
    `${'scenario'.padEnd(18)}${'postings/s'.padStart(11)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'ops'.padStart(9)}${'failed'.padStart(8)}${'batch'.padStart(7)}${'node cpu'.padStart(10)}\n`,
  );
  for (const r of results)
    process.stdout.write(
      `${r.name.padEnd(18)}${fmt(r.perS, 0).padStart(11)}${fmt(r.p50, 2)}${fmt(r.p99, 2)}${String(r.ops).padStart(9)}${String(r.failed).padStart(8)}${(r.batch === undefined ? '-' : r.batch.toFixed(1)).padStart(7)}${`${r.nodeCpu.toFixed(0)}%`.padStart(10)}\n`,
    );
  const by = (n: string) => results.find((r) => r.name === n)?.perS ?? 0;
  process.stdout.write(
    `ratio batched/naive: uniform ${(by('batched uniform') / by('naive uniform')).toFixed(1)}x, hot ${(by('batched hot') / by('naive hot')).toFixed(1)}x\n`,
  );
}

/** The ledger under test, with the bench's batch settings. */
function benchLedger(db: ReturnType<typeof createDb>, log: ReturnType<typeof createLogger>): Ledger {
  return new Ledger({
    db,
    log,
    now: Date.now,
    inFlightBatches: inFlight,
    batchWindowMs: windowMs,
    ...(maxBatch ? { maxBatchCommands: maxBatch } : {}),
  });
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ledger-bench-'));
  const pg = await startEmbedded({ dir: join(dir, 'pg'), port: await freePort() });
  const log = createLogger('silent');
  const db = createDb({ connectionString: pg.url('postgres'), metrics: createMetrics(), log, max: 20 });
  try {
    const fsync = (
      await db.query<{ fsync: string; sc: string }>(
        `SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sc`,
      )
    ).rows[0];
    await migrate(db.pool);
    await loadLedgerCurrencies(db);
    const { wallets, hot } = await setupBench(db);
    const ledger = benchLedger(db, log);
    const run = randomBytes(4).toString('hex');
    const pick = () => wallets[Math.floor(Math.random() * wallets.length)] as string;
    const ctx = (i: number, body: unknown): WriteCtx => ({
      principal: { tenantId: tenant, clientId: 'bench', scopes: new Set(['core:write']) },
      requestId: `r${i}`,
      key: `${run}-${i}-${Math.random().toString(36).slice(2, 8)}`,
      method: 'POST',
      path: '/v1/core/postings',
      body,
    });
    const batched = (to: () => string) => async (i: number) => {
      const from = pick();
      let dest = to();
      if (dest === from) dest = hot;
      const body = {
        currency: 'KES',
        entries: [
          { account_id: from, side: 'debit' as const, amount: '0.01' },
          { account_id: dest, side: 'credit' as const, amount: '0.01' },
        ],
      };
      const r = await ledger.post(ctx(i, body), body);
      return r.status === 201;
    };
    const naive = (to: () => string) => async (i: number) => {
      const from = pick();
      let dest = to();
      if (dest === from) dest = hot;
      return naivePost(
        db,
        tenant,
        from,
        dest,
        '0.010000',
        `n${run}-${i}-${Math.random().toString(36).slice(2, 8)}`,
      );
    };
    await drive('warm-up', batched(pick));
    const results: Result[] = [];
    results.push(await drive('batched uniform', batched(pick), ledger.batcher.stats));
    results.push(await drive('naive uniform', naive(pick)));
    results.push(
      await drive(
        'batched hot',
        batched(() => hot),
        ledger.batcher.stats,
      ),
    );
    results.push(
      await drive(
        'naive hot',
        naive(() => hot),
      ),
    );
    printResults(results, fsync);
    const { rows } = await db.query<{ d: string; c: string }>(
      `SELECT sum(amount) FILTER (WHERE side = 'debit')::text AS d, sum(amount) FILTER (WHERE side = 'credit')::text AS c FROM ledger_entries`,
    );
    process.stdout.write(`check: total debits ${rows[0]?.d} = total credits ${rows[0]?.c}\n`);
  } finally {
    await db.close();
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

showingLoad(main).catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
