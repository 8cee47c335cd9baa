/**
 * Where a ledger batch spends its time. First the real write path: 16 clients post uniform
 * two-leg postings through the Ledger service for LEDGER_PROFILE_SECONDS, each round trip of
 * every batch timed by the batcher's step timer (wall time, and the CPU of the PostgreSQL
 * backend that ran it, from /proc), beside node's CPU per batch and the WAL fsyncs
 * (pg_stat_io). Then batches of the same postings through the same SQL by hand on one
 * connection, PostgreSQL's per-function self time (track_functions) and EXPLAIN (ANALYZE,
 * BUFFERS) of one ledger_apply call.
 * `npx tsx bench/ledger/profile.ts` (env LEDGER_PROFILE_SECONDS, LEDGER_PROFILE_BATCHES,
 * LEDGER_PROFILE_SIZE, LEDGER_PROFILE_HOT=1).
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbedded } from '../../core/db/embedded.ts';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { migrate } from '../../core/db/migrate.ts';
import type { PoolClient } from 'pg';
import { createDb } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freePort } from '../../shared/net.ts';
import { showingLoad } from '../lib/probe.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { setupBench, benchTenant } from './setup.ts';
import { Ledger } from '../../core/ledger/service.ts';
import type { BatchStep, BatchStepTimer } from '../../core/ledger/batcher.ts';

const batches = Number(process.env.LEDGER_PROFILE_BATCHES ?? 200);
const size = Number(process.env.LEDGER_PROFILE_SIZE ?? 16);

type Cmd = ReturnType<ReturnType<typeof commandMaker>>;
type Time = <T>(k: string, f: () => Promise<T>) => Promise<T>;

/** Uniform two-leg postings of 0.01 KES between random wallets (to the hot account in hot mode). */
function commandMaker(wallets: string[], hot: string, hotMode: boolean) {
  const pick = () => wallets[Math.floor(Math.random() * wallets.length)] as string;
  return () => ({
    op: 'post',
    tenant: benchTenant,
    id: uuidv7(),
    transaction_id: uuidv7(),
    type: 'TRANSFER',
    currency: 'KES',
    description: null,
    metadata: {},
    entries: [
      { account_id: pick(), side: 'debit', amount: '0.010000', currency: 'KES' },
      { account_id: hotMode ? hot : pick(), side: 'credit', amount: '0.010000', currency: 'KES' },
    ],
  });
}

/** CPU milliseconds (utime + stime) of a process, from /proc. */
function processCpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** WAL fsyncs and the time they took so far (track_wal_io_timing is on). */
async function walFsyncs(db: ReturnType<typeof createDb>): Promise<{ n: number; ms: number }> {
  const { rows } = await db.query<{ n: string; ms: string }>(
    `SELECT coalesce(sum(fsyncs), 0)::text AS n, coalesce(sum(fsync_time), 0)::text AS ms FROM pg_stat_io WHERE object = 'wal'`,
  );
  return { n: Number(rows[0]?.n), ms: Number(rows[0]?.ms) };
}

/**
 * The real path: 16 closed-loop clients through Ledger.post, every round trip of every batch
 * timed (wall and its backend's CPU); per batch: each step, node's CPU, the WAL fsyncs.
 */
async function timeRealPath(
  db: ReturnType<typeof createDb>,
  wallets: string[],
  hot: string,
  hotMode: boolean,
): Promise<void> {
  const seconds = Number(process.env.LEDGER_PROFILE_SECONDS ?? 6);
  const steps = new Map<BatchStep, { wall: number; cpu: number }>();
  const stepTimer: BatchStepTimer = async (step, pid, run) => {
    const c0 = processCpuMs(pid);
    const t0 = performance.now();
    try {
      return await run();
    } finally {
      const s = steps.get(step) ?? { wall: 0, cpu: 0 };
      s.wall += performance.now() - t0;
      s.cpu += processCpuMs(pid) - c0;
      steps.set(step, s);
    }
  };
  const ledger = new Ledger({ db, log: createLogger('silent'), now: Date.now, stepTimer });
  const pick = () => wallets[Math.floor(Math.random() * wallets.length)] as string;
  const principal = { tenantId: benchTenant, clientId: 'profile', scopes: new Set(['core:write']) };
  const post = async (i: number) => {
    const body = {
      currency: 'KES',
      entries: [
        { account_id: pick(), side: 'debit' as const, amount: '0.01' },
        { account_id: hotMode ? hot : pick(), side: 'credit' as const, amount: '0.01' },
      ],
    };
    const ctx = {
      principal,
      requestId: `p${i}`,
      key: `real-${i}-${uuidv7()}`,
      method: 'POST',
      path: '/v1/core/postings',
      body,
    };
    await ledger.post(ctx, body);
  };
  const wal0 = await walFsyncs(db);
  const b0 = { ...ledger.batcher.stats };
  const node0 = process.cpuUsage();
  const end = performance.now() + seconds * 1000;
  let seq = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (performance.now() < end) await post(seq++);
    }),
  );
  const elapsed = performance.now() - t0;
  const node = process.cpuUsage(node0);
  const wal = await walFsyncs(db);
  const n = ledger.batcher.stats.batches - b0.batches;
  const per = (x: number) => (x / Math.max(1, n)).toFixed(2).padStart(7);
  process.stdout.write(
    `\nreal path (Ledger.post, 16 clients, ${seconds}s, ${hotMode ? 'hot' : 'uniform'}): ${((seq / elapsed) * 1000).toFixed(0)} postings/s, ${n} batches of ${((ledger.batcher.stats.commands - b0.commands) / Math.max(1, n)).toFixed(1)}, ${per(elapsed)} ms wall per batch\n`,
  );
  process.stdout.write(
    `step               wall ms/batch  backend CPU ms/batch  waiting (round trip, locks, fsync)\n`,
  );
  for (const [k, v] of steps)
    process.stdout.write(
      `${k.padEnd(18)} ${per(v.wall)}        ${per(v.cpu)}               ${per(v.wall - v.cpu)}\n`,
    );
  process.stdout.write(
    `node CPU ${per((node.user + node.system) / 1000)} ms/batch; WAL fsyncs ${per(wal.n - wal0.n)}/batch taking ${per(wal.ms - wal0.ms)} ms/batch\n`,
  );
}

/**
 * CPU time of this backend (utime + stime from /proc): what a batch costs PostgreSQL,
 * unlike wall time hardly moved by other load on the machine.
 */
async function backendCpu(client: PoolClient): Promise<() => number> {
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const tick = 1000 / 100;
  return () => {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(f[11]) + Number(f[12])) * tick;
  };
}

/** `batches` batches through the batcher's steps, each step's wall and backend CPU time summed by name. */
async function runBatches(client: PoolClient, cmd: () => Cmd, time: Time): Promise<void> {
  for (let b = 0; b < batches; b++) {
    const cmds = Array.from({ length: size }, cmd);
    const keys = cmds.map((c) => `p-${c.id}`);
    await time('begin', () => client.query('BEGIN'));
    await time('claim keys', () =>
      client.query(
        `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash)
        SELECT $1, k, 'client:bench', 'POST', '/v1/core/postings', 'h' FROM unnest($2::text[]) k ORDER BY 1 ON CONFLICT DO NOTHING RETURNING key`,
        [benchTenant, keys],
      ),
    );
    // LEDGER_PROFILE_COMPARE=1: every other batch through the command-by-command path (A/B under the same load).
    if (process.env.LEDGER_PROFILE_COMPARE === '1' && b % 2 === 1)
      await time('apply_each (old)', () =>
        client.query('SELECT ledger_apply_each($1::jsonb) AS r', [JSON.stringify(cmds)]),
      );
    else
      await time('ledger_apply', () =>
        client.query('SELECT ledger_apply($1::jsonb) AS r', [JSON.stringify(cmds)]),
      );
    await time('complete keys', () =>
      client.query(
        `UPDATE idempotency_keys k SET response_status = 201, response_body = '{}' FROM unnest($2::text[]) d(key) WHERE k.tenant_id = $1 AND k.key = d.key AND k.principal = 'client:bench' AND k.key = ANY($2::text[])`,
        [benchTenant, keys],
      ),
    );
    await time('audit head lock', () =>
      client.query(`SELECT 1 FROM audit_chain_heads WHERE tenant_id = $1 FOR UPDATE`, [benchTenant]),
    );
    await time('commit', () => client.query('COMMIT'));
  }
}

/** The batches timed, then each step's share of wall time and its backend CPU per batch. */
async function timeBatches(client: PoolClient, cmd: () => Cmd, hotMode: boolean): Promise<void> {
  const cpu = await backendCpu(client);
  const t: Record<string, number> = {};
  const tc: Record<string, number> = {};
  const time: Time = async (k, f) => {
    const s = performance.now();
    const c0 = cpu();
    const r = await f();
    t[k] = (t[k] ?? 0) + performance.now() - s;
    tc[k] = (tc[k] ?? 0) + cpu() - c0;
    return r;
  };
  const cpu0 = cpu();
  const t0 = performance.now();
  await runBatches(client, cmd, time);
  const total = performance.now() - t0;
  const backendCpuMs = cpu() - cpu0;
  process.stdout.write(
    `\n${batches} batches of ${size} (${hotMode ? 'hot' : 'uniform'}): ${(((batches * size) / total) * 1000).toFixed(0)} postings/s single connection; backend CPU ${(backendCpuMs / batches).toFixed(2)} ms/batch = ${((backendCpuMs / batches / size) * 1000).toFixed(0)} µs/posting\n`,
  );
  for (const [k, v] of Object.entries(t))
    process.stdout.write(
      `${k.padEnd(16)} ${(v / batches).toFixed(2).padStart(8)} ms/batch ${((v / total) * 100).toFixed(0).padStart(4)}%   backend CPU ${((tc[k] ?? 0) / batches).toFixed(2).padStart(6)} ms/batch\n`,
    );
}

/** PostgreSQL's per-function self and total time per batch (track_functions). */
async function printFunctionTimes(client: PoolClient): Promise<void> {
  const { rows } = await client.query<{ funcname: string; calls: string; self: string; total: string }>(
    `SELECT funcname, calls::text, round(self_time::numeric / $1, 3)::text AS self, round(total_time::numeric / $1, 3)::text AS total
         FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT 15`,
    [batches],
  );
  process.stdout.write('\nfunction             calls   self ms/batch  total ms/batch\n');
  for (const r of rows)
    process.stdout.write(
      `${r.funcname.padEnd(24)}${r.calls.padStart(7)}${r.self.padStart(12)}${r.total.padStart(14)}\n`,
    );
}

/** Every statement inside one ledger_apply call, with its plan and time (auto_explain). */
async function printStatementTimes(client: PoolClient, cmd: () => Cmd): Promise<void> {
  await client.query(`LOAD 'auto_explain'`);
  await client.query(
    `SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = off; SET auto_explain.log_nested_statements = on; SET client_min_messages = log; SET auto_explain.log_level = notice`,
  );
  const notices: string[] = [];
  client.on('notice', (n) => notices.push(n.message ?? ''));
  await client.query('BEGIN');
  await client.query('SELECT ledger_apply($1::jsonb)', [JSON.stringify(Array.from({ length: size }, cmd))]);
  await client.query('ROLLBACK');
  await client.query(`SET auto_explain.log_min_duration = -1`);
  if (process.env.LEDGER_PROFILE_EXPLAIN === '1') process.stdout.write(`\n${notices.join('\n\n')}\n`);
  else
    for (const n of notices) {
      const m = /duration: ([\d.]+) ms\s+plan:\s+Query Text: ([^\n]{0,110})/.exec(n);
      if (m) process.stdout.write(`${m[1]!.padStart(8)} ms  ${m[2]!.replace(/\s+/g, ' ')}\n`);
    }
}

/** EXPLAIN (ANALYZE, BUFFERS) of the keys' completion and of one ledger_apply call, rolled back. */
async function printPlans(client: PoolClient, cmd: () => Cmd): Promise<void> {
  await client.query('BEGIN');
  const keyPlan = await client.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN (ANALYZE, BUFFERS) UPDATE idempotency_keys k SET response_status = d.status, response_body = d.body
       FROM unnest($1::text[], $2::text[], $3::int[], $4::text[]) AS d(tenant_id, key, status, body)
      WHERE k.tenant_id = d.tenant_id AND k.key = d.key AND k.tenant_id = ANY($1::text[]) AND k.key = ANY($2::text[])`,
    [
      Array(size).fill(benchTenant),
      Array.from({ length: size }, (_, i) => `nokey-${i}`),
      Array(size).fill(201),
      Array(size).fill('{}'),
    ],
  );
  process.stdout.write(`\ncompleteKeys plan:\n${keyPlan.rows.map((r) => r['QUERY PLAN']).join('\n')}\n`);
  await client.query('ROLLBACK');
  await client.query('BEGIN');
  const plan = await client.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN (ANALYZE, BUFFERS) SELECT ledger_apply($1::jsonb)`,
    [JSON.stringify(Array.from({ length: size }, cmd))],
  );
  await client.query('ROLLBACK');
  process.stdout.write(`\n${plan.rows.map((r) => r['QUERY PLAN']).join('\n')}\n`);
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ledger-prof-'));
  const logs: string[] = [];
  const pg = await startEmbedded({
    dir: join(dir, 'pg'),
    port: await freePort(),
    onLog: (l) => logs.push(l),
  });
  const log = createLogger('silent');
  const db = createDb({ connectionString: pg.url('postgres'), metrics: createMetrics(), log, max: 4 });
  try {
    await migrate(db.pool);
    await loadLedgerCurrencies(db);
    const { wallets, hot } = await setupBench(db);
    const hotMode = process.env.LEDGER_PROFILE_HOT === '1';
    // LEDGER_PROFILE_DROP="sql; sql": schema experiments (e.g. drop a constraint) before timing.
    for (const stmt of (process.env.LEDGER_PROFILE_DROP ?? '').split(';').filter((x) => x.trim()))
      await db.query(stmt);
    await db.query(`ALTER SYSTEM SET track_wal_io_timing = on`);
    await db.query('SELECT pg_reload_conf()');
    await timeRealPath(db, wallets, hot, hotMode);
    await db.query(`ALTER SYSTEM SET track_functions = 'all'`);
    await db.query('SELECT pg_reload_conf()');
    await db.query('SELECT pg_stat_reset()');
    const cmd = commandMaker(wallets, hot, hotMode);
    const client = await db.pool.connect();
    // Released however the run ends: a client still checked out would hold db.close() forever.
    try {
      await timeBatches(client, cmd, hotMode);
      await printFunctionTimes(client);
      await printStatementTimes(client, cmd);
      await printPlans(client, cmd);
    } finally {
      client.release();
    }
  } finally {
    await db.close();
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

showingLoad(main).catch((err: unknown) => {
  process.stderr.write(`profile failed: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
