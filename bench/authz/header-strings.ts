/**
 * Where the floor's old generation comes from (issue 18 item 1): the gRPC transport. Node's HTTP/2
 * (node_http2.cc, under @grpc/grpc-js) gives each received header value to JavaScript as an
 * external string over nghttp2's buffer, and V8 allocates external strings in the old generation:
 * they are not promoted by a scavenge, they are born old, and only a major GC frees them (its
 * `clear.external_string_table` phase finalises every one since the last, in the pause). This bench
 * serves Checks with no decision (the edge's own gRPC server, route table and answer encoder, as the
 * authz bench's floor line) while ghz, from its own process, sends 0, 5, 10 and 20 extra metadata
 * headers per call, short and long, and prints how much the old generation grew per Check in each
 * line. If the growth is the headers' external strings, it rises by the same amount per header
 * whatever the value's length (the bytes stay outside the heap; a copied string would grow with
 * them). Prints; asserts nothing.
 *   npx tsx bench/authz/header-strings.ts [--requests 3000] [--rps 1000]
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { buildRouteTable } from '../../edge/routes.ts';
import { bindEdge, createEdgeServer } from '../../edge/server.ts';
import { createLogger } from '../../shared/log.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { option, runBench } from '../lib/harness.ts';
import { LoopProbe, oldGrowthPerRequest, showingLoad } from '../lib/probe.ts';
import { checkRequest, type GhzReport, ghzArgs, ghzPath, ghzRequestFile } from './ghz.ts';

const execFileAsync = promisify(execFile);
const requests = option('requests', 3000);
const rps = option('rps', 1000);

/** `count` extra headers, each value `length` characters. */
function headers(count: number, length: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < count; i++) out[`x-extra-${i}`] = `${i}`.padEnd(length, 'v');
  return out;
}

const lines: { name: string; metadata: Record<string, string> }[] = [
  { name: 'no extra header', metadata: {} },
  { name: '5 extra headers, 16-character values', metadata: headers(5, 16) },
  { name: '10 extra headers, 16-character values', metadata: headers(10, 16) },
  { name: '10 extra headers, 400-character values', metadata: headers(10, 400) },
  { name: '20 extra headers, 16-character values', metadata: headers(20, 16) },
];

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-header-strings-'));
  const server = createEdgeServer({
    log: createLogger('silent'),
    resolve: buildRouteTable(routeDeclarations),
    decide: async () => ({ allow: true, status: 200 }),
  });
  const address = `127.0.0.1:${await bindEdge(server, 0)}`;
  const file = await ghzRequestFile(dir, checkRequest('GET', '/v1/accounts', '', 'x'.repeat(720)));
  // The report goes to a file, read after the line: ghz's output must not count as this process's heap.
  const report = join(dir, 'report.json');
  const ghz = async (n: number, metadata: Record<string, string>) => {
    await execFileAsync(ghzPath(), [...ghzArgs(file, { rps, n, c: 16, metadata }), '-o', report, address]);
  };
  const read = async () => JSON.parse(await readFile(report, 'utf8')) as GhzReport;
  // A full collection before each line, so that no major GC falls in one and its growth reads whole.
  setFlagsFromString('--expose-gc');
  const collect = runInNewContext('gc') as () => void;
  try {
    process.stdout.write(
      `the floor server, ghz ${requests} Checks per line at ${rps} req/s, 16 concurrent\n`,
    );
    for (const line of lines) {
      await ghz(1000, line.metadata); // warm-up
      collect();
      const probe = new LoopProbe();
      probe.start();
      await ghz(requests, line.metadata);
      const s = probe.stop();
      const r = await read();
      const ok = r.statusCodeDistribution.OK ?? 0;
      process.stdout.write(
        `${line.name.padEnd(40)} ${oldGrowthPerRequest(s, ok)}; ${s.gcCount} GCs; ${ok} OK of ${r.count}\n`,
      );
    }
  } finally {
    server.forceShutdown();
    await rm(dir, { recursive: true, force: true });
  }
}

runBench(() => showingLoad(main));
