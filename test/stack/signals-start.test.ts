/**
 * Issue 15 item 2: SIGINT or SIGTERM to the npm process, to node, or Ctrl-C (SIGINT to the
 * whole foreground process group) stops the whole tree, PostgreSQL included, within 10 s (`npm start`).
 * Each case runs the real `npm` from PATH, as a newcomer or a process manager would.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { portFree, processTree, waitFor } from '../helpers/process.ts';
import { cases, nodeOf, npm, postmasterPid, stopsWithin } from '../helpers/signals.ts';

describe('npm start stops as a whole on every signal', () => {
  let dataDir: string;
  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'signals-'));
  });
  after(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  for (const c of cases) {
    it(`${c.name} stops npm, node and PostgreSQL and frees the ports`, async () => {
      const p = npm(['start'], { DATA_DIR: dataDir, GATEWAY_PORT: '0', CORE_PORT: '0', AUTHZ_PORT: '0' });
      const npmPid = p.child.pid as number;
      const banner = await waitFor(
        () =>
          /gateway \(point clients here\): http:\/\/127\.0\.0\.1:(\d+)[\s\S]*internal: core 127\.0\.0\.1:(\d+), edge authz gRPC 127\.0\.0\.1:(\d+)/.exec(
            p.output().stdout,
          ) ?? undefined,
        90_000,
      ).catch(() => assert.fail(`no banner: ${p.output().stderr}`));
      const ports = banner.slice(1, 4).map(Number);
      const node = nodeOf(npmPid, 'bin/start.ts');
      const postgres = await postmasterPid(join(dataDir, 'pg'));
      const tree = processTree(npmPid, postgres);
      assert.ok(tree.includes(node) && tree.includes(postgres) && tree.length >= 3);
      await stopsWithin(c, p, node, tree);
      for (const port of ports) assert.ok(await portFree(port), `port ${port} is free`);
    });
  }
});
