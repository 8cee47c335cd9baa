/**
 * The whole stack (bin/stack.ts on a fresh test database, ports 0, silent logs)
 * as the end-to-end suites start it, with its development DATA_DIR and demo.json; `stop` stops
 * it and removes both.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack, type StackOptions } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from './db.ts';

export interface E2eStack {
  tdb: TestDb;
  dataDir: string;
  stack: Stack;
  /** The dev gateway's origin (what clients call). */
  gw: string;
  /** Core's own origin, for calls that bypass the edge. */
  core: string;
  /** DATA_DIR/demo.json as the seed wrote it. */
  demo: unknown;
  stop(): Promise<void>;
}

/** `opts` adds to the suites' stack options (say, loopback webhook and identity-provider targets). */
export async function startE2eStack(name: string, opts: StackOptions = {}): Promise<E2eStack> {
  const tdb = await freshDatabase({ migrate: false });
  const dataDir = await mkdtemp(join(tmpdir(), `e2e-${name}-`));
  const config = loadConfig({
    GATEWAY_PORT: '0',
    CORE_PORT: '0',
    AUTHZ_PORT: '0',
    DATA_DIR: dataDir,
    DATABASE_URL: tdb.url,
    LOG_LEVEL: 'silent',
  });
  const stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000, ...opts });
  return {
    tdb,
    dataDir,
    stack,
    gw: `http://127.0.0.1:${stack.ports.gateway}`,
    core: `http://127.0.0.1:${stack.ports.core}`,
    demo: JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')),
    async stop() {
      await stack.stop();
      await tdb.drop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
