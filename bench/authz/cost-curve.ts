/**
 * What a Check's cost does to the tail on this machine, apart from anything the edge's code does
 * (issue 18 item 1). The authz bench's floor server (the edge's gRPC server, route table and
 * answer encoder, `createEdgeServer`) answers after a synthetic decision: a busy loop of N µs on
 * the thread answering Checks; the same loop on a worker thread (what a decision thread of its own
 * would buy: the answering thread only hands the Check over and back); and one stall of the
 * answering thread in the middle of a line (what one major GC pause of that length does to a line).
 * Driven by ghz from its own process with a transfer-sized request, as `run.ts` drives the edge,
 * the configurations interleaved round by round and pooled; ratios to the floor (no decision) of
 * the same run. Prints; asserts nothing.
 *   npx tsx bench/authz/cost-curve.ts [--requests 5000] [--rps 1000] [--rounds 2] [--only background,stall]
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Worker } from 'node:worker_threads';
import { auditFlushMs } from '../../edge/audit-writer.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import { bindEdge, createEdgeServer } from '../../edge/server.ts';
import type { CheckRequest } from '../../edge/types.ts';
import { createLogger } from '../../shared/log.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { option, runBench } from '../lib/harness.ts';
import { showingLoad } from '../lib/probe.ts';
import { checkRequest, type GhzReport, ghzArgs, ghzPath, ghzRequestFile, latencyAt, pooled } from './ghz.ts';

const execFileAsync = promisify(execFile);
const requests = option('requests', 5000);
const rps = option('rps', 1000);
const rounds = Math.max(1, option('rounds', 2));

/** One synthetic decision: `us` of CPU on the answering thread or a worker's, and an optional stall. */
interface Config {
  name: string;
  us: number;
  onWorker?: boolean;
  /**
   * CPU per Check spent later on a background thread, as the audit thread spends it: the Checks'
   * share gathered and handed over every 50 ms (auditFlushMs), never awaited by a Check.
   */
  backgroundUs?: number;
  /** The background thread's nice value (Linux: per thread), 0 when not given. */
  backgroundNice?: number;
  /** How often the background share is handed over (default auditFlushMs, as the audit writer). */
  backgroundEveryMs?: number;
  /** One stall of the answering thread this long, half way through the measured run. */
  stallMs?: number;
}

const allConfigs: Config[] = [
  { name: 'floor: no decision', us: 0 },
  { name: '100 µs on the answering thread', us: 100 },
  { name: '200 µs on the answering thread', us: 200 },
  { name: '300 µs on the answering thread', us: 300 },
  { name: '200 µs on a worker thread', us: 200, onWorker: true },
  { name: '200 µs + 100 µs in the background', us: 200, backgroundUs: 100 },
  { name: 'the same, background thread nice 10', us: 200, backgroundUs: 100, backgroundNice: 10 },
  { name: 'the same, handed over every 5 ms', us: 200, backgroundUs: 100, backgroundEveryMs: 5 },
  { name: 'floor + one 30 ms stall', us: 0, stallMs: 30 },
  { name: '200 µs + one 30 ms stall', us: 200, stallMs: 30 },
];

/** `--only a,b`: the floor and the configurations whose names contain one of the words. */
const onlyAt = process.argv.indexOf('--only');
const only = onlyAt > 0 ? (process.argv[onlyAt + 1] ?? '').split(',') : undefined;
const configs = allConfigs.filter(
  (c, i) => i === 0 || only === undefined || only.some((w) => w !== '' && c.name.includes(w)),
);

function spin(us: number): void {
  const end = performance.now() + us / 1000;
  while (performance.now() < end);
}

/**
 * A worker thread that spins `us` for each message and answers it; `background` spins without an
 * answer; `nice` sets the thread's own nice value (Linux: setpriority on its thread id).
 */
function spinner(): {
  ask(us: number): Promise<void>;
  background(us: number): void;
  nice(value: number): void;
  stop(): Promise<number>;
} {
  const w = new Worker(
    `const { parentPort } = require('node:worker_threads');
     const { readlinkSync } = require('node:fs');
     const { setPriority } = require('node:os');
     parentPort.on('message', ({ id, us, nice }) => {
       if (nice !== undefined) {
         setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), nice);
         return;
       }
       const end = performance.now() + us / 1000;
       while (performance.now() < end);
       if (id !== undefined) parentPort.postMessage(id);
     });`,
    { eval: true },
  );
  const waiting = new Map<number, () => void>();
  let seq = 0;
  w.on('message', (id: number) => {
    waiting.get(id)?.();
    waiting.delete(id);
  });
  return {
    ask: (us) =>
      new Promise<void>((resolve) => {
        const id = ++seq;
        waiting.set(id, resolve);
        w.postMessage({ id, us });
      }),
    background: (us) => w.postMessage({ us }),
    nice: (value) => w.postMessage({ nice: value }),
    stop: () => w.terminate(),
  };
}

/** A transfer-sized CheckRequest (a JWT-sized bearer, a JSON body) on a route the table knows. */
function transferRequest(): CheckRequest {
  const body = JSON.stringify({ amount: '250.00', currency: 'KES', beneficiaryId: 'b1', reference: 'r1' });
  return checkRequest('POST', '/v1/transfers', body, 'x'.repeat(720));
}

/** ghz at `rate` (0: unthrottled) against `address`, 16 concurrent. */
async function ghz(address: string, file: string, n: number, rate: number): Promise<GhzReport> {
  const { stdout } = await execFileAsync(ghzPath(), [...ghzArgs(file, { rps: rate, n, c: 16 }), address], {
    maxBuffer: 64 * 1024 * 1024,
  });
  return JSON.parse(stdout) as GhzReport;
}

const ms = (ns: number) => (ns / 1e6).toFixed(3);
const row = (name: string, r: GhzReport, floor?: GhzReport) =>
  `${name.padEnd(34)} p50 ${ms(latencyAt(r, 50)).padStart(7)} ms  p99 ${ms(latencyAt(r, 99)).padStart(7)} ms  p99.9 ${ms(latencyAt(r, 99.9)).padStart(7)} ms  ${r.rps.toFixed(0).padStart(5)} req/s${
    floor
      ? `  p99 ${(latencyAt(r, 99) / latencyAt(floor, 99)).toFixed(2)}x  p99.9 ${(latencyAt(r, 99.9) / latencyAt(floor, 99.9)).toFixed(2)}x`
      : ''
  }\n`;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-cost-curve-'));
  const worker = spinner();
  let current: Config = configs[0] as Config;
  let stallAt = Number.POSITIVE_INFINITY;
  let owed = 0;
  let handedAt = performance.now();
  // Checked every millisecond; handed over once the configuration's interval has passed.
  const handOver = setInterval(() => {
    const now = performance.now();
    if (now - handedAt < (current.backgroundEveryMs ?? auditFlushMs)) return;
    handedAt = now;
    if (owed > 0) worker.background(owed);
    owed = 0;
  }, 1);
  const server = createEdgeServer({
    log: createLogger('silent'),
    resolve: buildRouteTable(routeDeclarations),
    decide: async () => {
      if (performance.now() >= stallAt) {
        stallAt = Number.POSITIVE_INFINITY;
        spin((current.stallMs ?? 0) * 1000);
      }
      if (current.onWorker) await worker.ask(current.us);
      else if (current.us > 0) spin(current.us);
      owed += current.backgroundUs ?? 0;
      return { allow: true, status: 200 };
    },
  });
  const address = `127.0.0.1:${await bindEdge(server, 0)}`;
  const file = await ghzRequestFile(dir, transferRequest());
  const runs = configs.map((): GhzReport[] => []);
  try {
    process.stdout.write(
      `synthetic decisions behind the edge's gRPC server, ghz ${requests} Checks each at ${rps} req/s, 16 concurrent, ${rounds} rounds\n`,
    );
    for (let round = 1; round <= rounds; round++) {
      for (const [i, c] of configs.entries()) {
        current = c;
        worker.nice(c.backgroundNice ?? 0);
        await ghz(address, file, 2000, rps); // warm-up
        stallAt = c.stallMs ? performance.now() + (requests / rps / 2) * 1000 : Number.POSITIVE_INFINITY;
        const r = await ghz(address, file, requests, rps);
        runs[i]?.push(r);
        process.stdout.write(`round ${round}: ${row(c.name, r)}`);
      }
    }
    const floor = pooled(runs[0] ?? []);
    process.stdout.write(
      `pooled over ${rounds} rounds, as a ratio to the floor (issue 18 item 1's targets: p99 ≤ 1.5x, p99.9 ≤ 2x):\n`,
    );
    for (const [i, c] of configs.entries()) process.stdout.write(row(c.name, pooled(runs[i] ?? []), floor));
  } finally {
    clearInterval(handOver);
    server.forceShutdown();
    await worker.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

runBench(() => showingLoad(main));
