/**
 * Load driver for bench/path/run.ts, run as its own process so that load generation never
 * shares an event loop with the services it measures: autocannon against one URL for a fixed
 * time, every request with a fresh Idempotency-Key and request id (a repeated key would be
 * answered from the idempotency store, not posted). Latencies are kept per response in
 * microseconds (autocannon's own histogram counts whole milliseconds), of 2xx answers only.
 * Prints one JSON line.
 *   tsx bench/path/load.ts '{"url":…,"method":…,"headers":{…},"body":…,"connections":16,"seconds":10}'
 */
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';

interface Job {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  connections: number;
  seconds: number;
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
const fresh = ['idempotency-key', 'x-request-id', 'x-req-id', 'x-decision-id'].filter(
  (h) => h in job.headers || h === 'idempotency-key',
);
const latencies: number[] = [];
const statuses: Record<string, number> = {};

const instance = autocannon({
  url: job.url,
  connections: job.connections,
  duration: job.seconds,
  requests: [
    {
      method: job.method,
      ...(job.body !== undefined ? { body: job.body } : {}),
      setupRequest: (req: Record<string, unknown>) => {
        const headers: Record<string, string> = { ...job.headers };
        if (job.method === 'POST') for (const h of fresh) headers[h] = randomUUID();
        return { ...req, headers };
      },
    },
  ],
});
// Latencies and throughput of answers 2xx only: a refusal (503 authz_unavailable) is counted
// in `statuses`, never averaged into the path's latency.
instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
  if (status >= 200 && status < 300) latencies.push(ms * 1000);
  statuses[status] = (statuses[status] ?? 0) + 1;
});
const result = await instance;
latencies.sort((a, b) => a - b);
const at = (p: number) =>
  latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0;
process.stdout.write(
  `${JSON.stringify({
    count: latencies.length,
    rps: latencies.length / job.seconds,
    p50Us: at(50),
    p99Us: at(99),
    p999Us: at(99.9),
    statuses,
    errors: result.errors,
    timeouts: result.timeouts,
  })}\n`,
);
