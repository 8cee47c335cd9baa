/**
 * ghz, the gRPC load generator the authz benches drive the Check from (a process of its own), and the
 * CheckRequests they send: where ghz is, the request file it reads, its arguments and the latencies of its JSON report.
 * Install: `go install github.com/bojand/ghz/cmd/ghz@v0.120.0`.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { envoyProtoIncludeDirs } from '../../edge/proto.ts';
import type { CheckRequest } from '../../edge/types.ts';
import { percentile } from '../lib/harness.ts';

export interface GhzReport {
  rps: number;
  count: number;
  latencyDistribution: { percentage: number; latency: number }[];
  statusCodeDistribution: Record<string, number>;
  errorDistribution?: Record<string, number>;
  details?: { latency: number }[];
  loop?: string;
}

export function ghzPath(): string {
  const gopath = execFileSync('go', ['env', 'GOPATH']).toString().trim();
  return join(gopath, 'bin', 'ghz');
}

/** Writes `data` as ghz's `-D` file in `dir` (the raw body as base64, as protobuf JSON has bytes); returns its path. */
export async function ghzRequestFile(dir: string, data: CheckRequest): Promise<string> {
  const file = join(dir, `req-${randomUUID()}.json`);
  const raw = data.attributes?.request?.http?.raw_body;
  const json = JSON.parse(
    JSON.stringify(data, (k, v: unknown) => (k === 'raw_body' ? undefined : v)),
  ) as CheckRequest;
  if (raw && json.attributes?.request?.http)
    (json.attributes.request.http as Record<string, unknown>).raw_body = Buffer.from(raw).toString('base64');
  await writeFile(file, JSON.stringify(json));
  return file;
}

/**
 * ghz's arguments for `n` Checks from `file` over `c` concurrent calls on two connections (`rps` 0:
 * unthrottled); `metadata`: gRPC metadata sent with each call (HTTP/2 headers of the call).
 */
export function ghzArgs(
  file: string,
  opts: { rps: number; n: number; c: number; metadata?: Record<string, string> },
): string[] {
  const args = [
    '--insecure',
    '--proto',
    'envoy/service/auth/v3/external_auth.proto',
    '--import-paths',
    envoyProtoIncludeDirs.join(','),
    '--call',
    'envoy.service.auth.v3.Authorization.Check',
    '-D',
    file,
    '-n',
    String(opts.n),
    '-c',
    String(opts.c),
    '--connections',
    '2',
    '--format',
    'json',
    '--timeout',
    '1s',
  ];
  if (opts.rps > 0) args.push('--rps', String(opts.rps));
  if (opts.metadata) args.push('-m', JSON.stringify(opts.metadata));
  return args;
}

/** A report's p-th percentile latency in ns (ghz's summary stops at p99; the per-call details give p99.9). */
export const latencyAt = (r: GhzReport, p: number): number =>
  r.latencyDistribution.find((d) => d.percentage === p)?.latency ??
  percentile(
    (r.details ?? []).map((d) => d.latency).sort((x, y) => x - y),
    p,
  );

/** Several runs of one line as one: their per-call latencies pooled, their counts summed. */
export function pooled(runs: GhzReport[]): GhzReport {
  const first = runs[0];
  if (!first || runs.length === 1) return first as GhzReport;
  const lat = runs.flatMap((r) => (r.details ?? []).map((d) => d.latency)).sort((x, y) => x - y);
  const codes: Record<string, number> = {};
  for (const r of runs)
    for (const [k, n] of Object.entries(r.statusCodeDistribution)) codes[k] = (codes[k] ?? 0) + n;
  return {
    ...first,
    rps: runs.reduce((a, r) => a + r.rps, 0) / runs.length,
    count: runs.reduce((a, r) => a + r.count, 0),
    latencyDistribution: [50, 99, 99.9].map((percentage) => ({
      percentage,
      latency: percentile(lat, percentage),
    })),
    statusCodeDistribution: codes,
    details: lat.map((latency) => ({ latency })),
    loop: 'pooled (each run above)',
  };
}

/** A CheckRequest as Envoy sends it for this method, path, body and bearer token. */
export function checkRequest(
  method: string,
  path: string,
  body: string | undefined,
  bearer: string,
): CheckRequest {
  return {
    attributes: {
      source: { address: { socket_address: { address: '127.0.0.1', port_value: 40000 } } },
      request: {
        http: {
          id: 'bench',
          method,
          path,
          host: 'api.example',
          scheme: 'https',
          protocol: 'HTTP/2',
          headers: {
            ':method': method,
            ':path': path,
            ':authority': 'api.example',
            authorization: `Bearer ${bearer}`,
            'content-type': 'application/json',
            'user-agent': 'bench',
          },
          raw_body: Buffer.from(body ?? ''),
          size: String(body?.length ?? 0),
        },
      },
    },
  };
}
