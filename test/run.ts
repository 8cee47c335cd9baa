/**
 * `npm test`: one fresh embedded PostgreSQL on a free port in a temporary directory (removed
 * afterwards), then node's test runner over every `test/**\/*.test.ts`. Each test file makes
 * its own database on that server, so the suite is safe to run twice in a row and while
 * `npm start` is running.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startEmbedded } from '../core/db/embedded.ts';
import { freePort } from '../lib/net.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
/** Test files run side by side; each has its own database. */
const fileConcurrency = 4;

async function testFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await testFiles(full)));
    else if (entry.name.endsWith('.test.ts')) out.push(relative(root, full));
  }
  return out.sort();
}

async function main(): Promise<number> {
  const filter = process.argv.slice(2);
  const files = (await testFiles(join(root, 'test'))).filter((f) => filter.length === 0 || filter.some((p) => f.includes(p)));
  if (files.length === 0) {
    process.stderr.write('no test files matched\n');
    return 1;
  }
  const dir = await mkdtemp(join(tmpdir(), 'payments-test-'));
  const pg = await startEmbedded({ dir: join(dir, 'pg'), port: await freePort() });
  const cleanup = async () => {
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  };
  process.on('SIGINT', () => void cleanup().then(() => process.exit(130)));
  try {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--test', `--test-concurrency=${fileConcurrency}`, '--test-reporter=spec', ...files],
      { cwd: root, stdio: 'inherit', env: { ...process.env, TEST_DATABASE_URL: pg.url('postgres') } },
    );
    return await new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
  } finally {
    await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`test run failed: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
