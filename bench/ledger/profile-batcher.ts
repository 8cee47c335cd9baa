/**
 * The batcher's real path, measured step by step (issue 18 item 2): the Ledger service with
 * `clients` concurrent closed-loop clients posting two-leg postings, as bench/ledger/run.ts
 * drives it. Every query a batch sends is timed where the batcher sends it (the pool's clients
 * are wrapped): its wall time and the CPU its PostgreSQL backend spent meanwhile (utime+stime
 * from /proc, 10 ms ticks, so only sums over many batches mean anything). WAL fsyncs come from
 * pg_stat_io (track_wal_io_timing), the node process's CPU from process.cpuUsage.
 */
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { Ledger } from '../../core/ledger/service.ts';
import { benchTenant } from './setup.ts';

const seconds = Number(process.env.LEDGER_PROFILE_SECONDS ?? 5);
const clients = Number(process.env.LEDGER_BENCH_CLIENTS ?? 16);

/** The batcher's round trips, named by the statement that starts each. */
const steps: [RegExp, string][] = [
  [/^BEGIN; SELECT ledger_apply_keyed/, 'claim keys + apply'],
  [/^\s*INSERT INTO audit_chain_heads/, 'audit: lock chain head'],
  [/^\s*WITH ins AS/, 'audit: write rows'],
  [/^SELECT idempotency_complete|^COMMIT/, 'responses + COMMIT'],
];

function backendCpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return (Number(f[11]) + Number(f[12])) * 10;
}

interface Tally { n: number; wall: number; cpu: number }

/** Wrap every client the pool hands out so each query is timed under its step's name. */
function instrument(db: Db, tally: Map<string, Tally>): () => void {
  const pool = db.pool as unknown as { connect: () => Promise<pg.PoolClient> };
  const original = pool.connect.bind(pool);
  const wrapped = new WeakSet<pg.PoolClient>();
  pool.connect = async () => {
    const client = await original();
    if (wrapped.has(client)) return client;
    wrapped.add(client);
    const query = client.query.bind(client) as (sql: string, params?: unknown[]) => Promise<unknown>;
    const pid = (client as unknown as { processID: number }).processID;
    (client as unknown as { query: typeof query }).query = async (sql: string, params?: unknown[]) => {
      const name = steps.find(([re]) => re.test(sql))?.[1] ?? 'other';
      const t0 = performance.now();
      const c0 = backendCpuMs(pid);
      try {
        return await query(sql, params);
      } finally {
        const t = tally.get(name) ?? { n: 0, wall: 0, cpu: 0 };
        t.n++;
        t.wall += performance.now() - t0;
        t.cpu += backendCpuMs(pid) - c0;
        tally.set(name, t);
      }
    };
    return client;
  };
  return () => { pool.connect = original; };
}

async function walFsyncs(db: Db): Promise<{ n: number; ms: number }> {
  const { rows } = await db.query<{ n: string | null; ms: number | null }>(`SELECT sum(fsyncs)::text AS n, sum(fsync_time) AS ms FROM pg_stat_io WHERE object = 'wal'`);
  return { n: Number(rows[0]?.n ?? 0), ms: Number(rows[0]?.ms ?? 0) };
}

export async function batcherPath(db: Db, wallets: string[], hot: string | undefined): Promise<void> {
  const ledger = new Ledger({ db, log: createLogger('silent'), now: Date.now });
  const run = randomBytes(4).toString('hex');
  const pick = () => wallets[Math.floor(Math.random() * wallets.length)] as string;
  let seq = 0;
  const post = async () => {
    const i = seq++;
    const body = { currency: 'KES', entries: [{ account_id: pick(), side: 'debit' as const, amount: '0.01' }, { account_id: hot ?? pick(), side: 'credit' as const, amount: '0.01' }] };
    const r = await ledger.post({ principal: { tenantId: benchTenant, clientId: 'bench', scopes: new Set(['core:write']) }, requestId: `p${i}`, key: `${run}-${i}`, method: 'POST', path: '/v1/core/postings', body }, body);
    if (r.status !== 201) throw new Error(`posting answered ${r.status}: ${r.body}`);
  };
  const loop = async (untilMs: number) => {
    await Promise.all(Array.from({ length: clients }, async () => { while (performance.now() < untilMs) await post(); }));
  };
  await loop(performance.now() + 1000); // warm-up: connections, plans
  const tally = new Map<string, Tally>();
  const restore = instrument(db, tally);
  const b0 = { ...ledger.batcher.stats };
  const wal0 = await walFsyncs(db);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await loop(t0 + seconds * 1000);
  const elapsed = performance.now() - t0;
  const node = process.cpuUsage(cpu0);
  const wal1 = await walFsyncs(db);
  restore();
  const batches = ledger.batcher.stats.batches - b0.batches;
  const commands = ledger.batcher.stats.commands - b0.commands;
  const per = (x: number) => (x / Math.max(1, batches)).toFixed(2).padStart(8);
  const out = [
    `\nThe batcher's path (${hot ? 'hot' : 'uniform'}, ${clients} clients, ${(elapsed / 1000).toFixed(1)} s): ${(commands / elapsed * 1000).toFixed(0)} postings/s, ${batches} batches of ${(commands / Math.max(1, batches)).toFixed(1)}, ${(batches / elapsed * 1000).toFixed(0)} batches/s`,
    `${'round trip'.padEnd(26)}${'calls/batch'.padStart(12)}${'wall ms/batch'.padStart(15)}${'backend CPU ms/batch'.padStart(22)}`,
  ];
  let wall = 0;
  let cpu = 0;
  for (const [name, t] of [...tally].sort((a, b) => b[1].wall - a[1].wall)) {
    wall += t.wall;
    cpu += t.cpu;
    out.push(`${name.padEnd(26)}${(t.n / Math.max(1, batches)).toFixed(2).padStart(12)}${per(t.wall).padStart(15)}${per(t.cpu).padStart(22)}`);
  }
  out.push(`${'all round trips'.padEnd(26)}${''.padStart(12)}${per(wall).padStart(15)}${per(cpu).padStart(22)}`);
  out.push(`WAL fsyncs: ${((wal1.n - wal0.n) / Math.max(1, batches)).toFixed(2)} per batch, ${per(wal1.ms - wal0.ms).trim()} ms/batch of fsync time (inside "responses + COMMIT")`);
  out.push(`node CPU: ${per((node.user + node.system) / 1000).trim()} ms/batch (${((node.user + node.system) / 1000 / elapsed * 100).toFixed(0)}% of one core); wall between batches' starts: ${per(elapsed).trim()} ms`);
  process.stdout.write(`${out.join('\n')}\n`);
}
