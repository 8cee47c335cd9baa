/**
 * Issue 15 item 2: SIGINT or SIGTERM to the npm process, to node, or Ctrl-C (SIGINT to the
 * whole foreground process group) stops the whole tree, PostgreSQL included, within 10 s; for `npm test`,
 * its PostgreSQL and temporary directory are removed.
 * Each case runs the real `npm` from PATH, as a newcomer or a process manager would.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { processTree, waitFor } from '../helpers/process.ts';
import { cases, nodeOf, npm, postmasterPid, stopsWithin } from '../helpers/signals.ts';

// Each case has its own npm run, TMPDIR and PostgreSQL, and mostly waits: they run side by side.
describe('npm test stops as a whole on every signal and removes its PostgreSQL and temporary files', {
  concurrency: true,
}, () => {
  // Each target and each signal once (a run costs an initdb and a test file's start-up).
  const testCases = cases.filter((c) =>
    [
      'SIGTERM to the npm process',
      'SIGINT to node',
      'Ctrl-C (SIGINT to the foreground process group)',
    ].includes(c.name),
  );
  for (const c of testCases) {
    it(`${c.name} while a test file runs`, async () => {
      const tmp = await mkdtemp(join(tmpdir(), 'interrupted-'));
      const p = npm(['test', '--', 'test/stack/stack.test'], { TMPDIR: tmp });
      try {
        const npmPid = p.child.pid as number;
        // The run's PostgreSQL is up and the test file is at work (it made its DATA_DIR in the run's TMPDIR).
        const run = await waitFor(async () => {
          const dir = (await readdir(tmp)).find((d) => d.startsWith('payments-test-'));
          if (!dir) return undefined;
          const inner = await readdir(join(tmp, dir, 'tmp')).catch(() => []);
          return inner.some((d) => d.startsWith('stack-')) ? join(tmp, dir) : undefined;
        }, 90_000);
        const postgres = await postmasterPid(join(run, 'pg'));
        const node = nodeOf(npmPid, 'test/run.ts');
        const tree = processTree(npmPid, postgres);
        assert.ok(
          tree.includes(postgres) && tree.length >= 4,
          'npm, run.ts, the test runner, a test file and PostgreSQL',
        );
        await stopsWithin(c, p, node, tree);
        // (tsx keeps its own transform cache in TMPDIR: a cache, not the run's.)
        assert.deepEqual(
          (await readdir(tmp)).filter((d) => d.startsWith('payments-test-')),
          [],
          'the run removed its temporary directory',
        );
      } finally {
        await rm(tmp, { recursive: true, force: true });
      }
    });
  }
});
