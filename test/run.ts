/**
 * `npm test`: one fresh embedded PostgreSQL on a free port in a temporary directory, then
 * node's test runner over every `test/**\/*.test.ts`. Each test file makes its own database on
 * that server (a migrated one is a copy of a template migrated once here), so the suite is safe to
 * run twice in a row and while `npm start` is running.
 *
 * Issue 15 items 1 and 2: the temporary directory (PostgreSQL's data and, through TMPDIR, every
 * temporary file the tests make) is removed however the run ends: success, failure, a failed
 * start, SIGINT/SIGTERM/SIGHUP to us or to npm, Ctrl-C, or npm going away.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { EmbeddedError, startEmbedded, type EmbeddedServer } from '../core/db/embedded.ts';
import { migrate } from '../core/db/migrate.ts';
import { freePort } from '../shared/net.ts';
import { inRunOrder } from './run-order.ts';
import { buildTestTree, compiledPath } from './tree.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
/** Test files run side by side; each has its own database. */
const fileConcurrency = 4;
/** Per test (not per file): see the spawn below. */
const testTimeoutMs = 240_000;
/** Issue 15 item 2: an interrupted run is gone within 10 s; the test processes get most of it. */
const childStopMs = 5_000;
/** The migrated database the test files copy (TEST_TEMPLATE_DATABASE). */
const templateDatabase = 'test_template';
/** How often we check that the process that started us is still there. */
const parentCheckMs = 500;

async function testFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await testFiles(full)));
    else if (entry.name.endsWith('.test.ts')) out.push(relative(root, full));
  }
  return out.sort();
}

/** Everything one run owns, released once, in order: test processes, PostgreSQL, files. */
class Run {
  dir: string | undefined;
  pg: EmbeddedServer | undefined;
  child: ChildProcess | undefined;
  private released: Promise<void> | undefined;

  get releasing(): boolean {
    return this.released !== undefined;
  }

  release(): Promise<void> {
    this.released ??= this.doRelease();
    return this.released;
  }

  private async doRelease(): Promise<void> {
    await this.stopChild();
    await this.pg?.stop();
    if (this.pg?.relocated) await rm(this.pg.dataDir, { recursive: true, force: true });
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }

  /** The test runner and everything it started share its process group: signal the group. */
  private async stopChild(): Promise<void> {
    const child = this.child;
    if (!child?.pid || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-(child.pid as number), signal);
      } catch {
        // already gone
      }
    };
    signalGroup('SIGTERM');
    const timer = setTimeout(() => signalGroup('SIGKILL'), childStopMs);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * The migrated database test files copy (test/helpers/db.ts): migrating one costs about a third of
 * a CPU second, most of it PostgreSQL's, and a copy a fraction of that; about a hundred files
 * migrate one each. When migrating fails, none: each file then migrates and reports the failure.
 */
async function migratedTemplate(server: EmbeddedServer): Promise<string | undefined> {
  const admin = new pg.Client({ connectionString: server.url('postgres') });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${templateDatabase}`);
  } finally {
    await admin.end();
  }
  const pool = new pg.Pool({ connectionString: server.url(templateDatabase), max: 1 });
  try {
    await migrate(pool);
    return templateDatabase;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`no template database (each file migrates its own): ${message.split('\n')[0]}\n`);
    return undefined;
  } finally {
    // No session may stay on a template while it is copied.
    await pool.end();
  }
}

async function main(run: Run): Promise<number> {
  const filter = process.argv.slice(2);
  const files = (await testFiles(join(root, 'test'))).filter(
    (f) => filter.length === 0 || filter.some((p) => f.includes(p)),
  );
  if (files.length === 0) {
    process.stderr.write('no test files matched\n');
    return 1;
  }
  run.dir = await mkdtemp(join(tmpdir(), 'payments-test-'));
  // Enterable (not listable) by the `postgres` user PostgreSQL runs as when we are root.
  await chmod(run.dir, 0o711);
  const testTmp = join(run.dir, 'tmp');
  await mkdir(testTmp, { mode: 0o711 });
  await chmod(testTmp, 0o711);
  run.pg = await startEmbedded({ dir: join(run.dir, 'pg'), port: await freePort() });
  if (run.releasing) return 1;
  const template = await migratedTemplate(run.pg);
  if (run.releasing) return 1;
  // The test files run compiled, from a copy of the tree (test/tree.ts).
  const tree = join(run.dir, 'tree');
  await buildTestTree(root, tree);
  if (run.releasing) return 1;
  // Its own process group (detached) so that stopping it reaches every process it started.
  const child = spawn(
    process.execPath,
    [
      // Stacks name the `.ts` lines (the compiled files carry inline source maps).
      '--enable-source-maps',
      // A test that hangs fails after this long (the longest passes in under a minute) instead of
      // holding the run until CI's own limit, and the report names it. Each test file's process
      // is started with this process's flags.
      `--test-timeout=${testTimeoutMs}`,
      compiledPath(tree, 'test/run-files.ts'),
      `--concurrency=${fileConcurrency}`,
      `--timeout=${testTimeoutMs}`,
      ...inRunOrder(files).map((file) => file.replace(/\.ts$/, '.js')),
    ],
    {
      cwd: tree,
      stdio: 'inherit',
      detached: true,
      env: {
        ...process.env,
        TEST_DATABASE_URL: run.pg.url('postgres'),
        // Empty when there is none (never one of an outer run's).
        TEST_TEMPLATE_DATABASE: template ?? '',
        TMPDIR: testTmp,
      },
    },
  );
  run.child = child;
  return await new Promise<number>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))),
  );
}

const run = new Run();
const finish = (code: number) => void run.release().finally(() => process.exit(code));
const exitCodes = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129 } as const;
for (const [signal, code] of Object.entries(exitCodes)) process.on(signal, () => finish(code));
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) finish(1);
}, parentCheckMs).unref();

main(run).then(finish, (err: unknown) => {
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(
    `${err instanceof EmbeddedError ? 'error' : 'test run failed'}: ${message.split('\n')[0]}\n`,
  );
  finish(1);
});
