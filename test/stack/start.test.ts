import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freshDatabase } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';
import { alive, startProcess as start, waitFor } from '../helpers/process.ts';

describe('npm start (bin/start.ts)', () => {
  it('starts embedded PostgreSQL and the stack, prints the banner, stops cleanly on SIGTERM', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'start-'));
    const p = start({ DATA_DIR: dataDir, GATEWAY_PORT: '0', CORE_PORT: '0', AUTHZ_PORT: '0' });
    try {
      const gw = await waitFor(
        () => /gateway \(point clients here\): (http:\/\/127\.0\.0\.1:\d+)/.exec(p.output().stdout)?.[1],
        60_000,
      );
      assert.match(p.output().stdout, /API docs: +http:\/\/127\.0\.0\.1:\d+\/v1\/docs/);
      assert.match(p.output().stdout, new RegExp(`data: +${join(dataDir, 'pg').replaceAll('/', '\\/')}`));
      // Ready once it answers 200; the first checks of a cold stack on a busy machine may still
      // miss the gateway's 100 ms authorization deadline and fail closed (503), which is correct.
      const ready = await waitFor(
        async () => ((await call(gw, 'GET', '/v1/ready')).status === 200 ? true : undefined),
        15_000,
      );
      assert.equal(ready, true);
      const pgPid = Number((await readFile(join(dataDir, 'pg', 'postmaster.pid'), 'utf8')).split('\n')[0]);
      assert.ok(alive(pgPid));
      const stopAt = Date.now();
      p.child.kill('SIGTERM');
      assert.equal(await p.exited, 0, p.output().stderr + p.output().stdout);
      assert.ok(Date.now() - stopAt < 10_000, 'stopped within 10 s');
      await waitFor(() => (alive(pgPid) ? undefined : true), 2000);
      assert.equal(existsSync(join(dataDir, 'pg', 'postmaster.pid')), false, 'PostgreSQL shut down cleanly');
    } finally {
      p.child.kill('SIGKILL');
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('says in one line that a port is taken and exits non-zero', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    const tdb = await freshDatabase({ migrate: false });
    const dataDir = await mkdtemp(join(tmpdir(), 'start-'));
    try {
      const p = start({
        DATA_DIR: dataDir,
        DATABASE_URL: tdb.url,
        GATEWAY_PORT: '0',
        CORE_PORT: String(port),
        AUTHZ_PORT: '0',
      });
      assert.equal(await p.exited, 1);
      assert.equal(p.output().stderr.trim(), `error: port ${port} (CORE_PORT) is already in use`);
    } finally {
      blocker.close();
      await tdb.drop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('says in one line that PostgreSQL cannot start and exits non-zero', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'start-'));
    try {
      await mkdir(join(dataDir, 'pg'));
      await writeFile(join(dataDir, 'pg', 'PG_VERSION'), 'not a cluster\n');
      const p = start({ DATA_DIR: dataDir, GATEWAY_PORT: '0', CORE_PORT: '0', AUTHZ_PORT: '0' });
      assert.equal(await p.exited, 1);
      const lines = p.output().stderr.trim().split('\n');
      assert.equal(lines.length, 1, p.output().stderr);
      assert.match(lines[0] ?? '', /^error: PostgreSQL could not start/);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('lists every configuration error and exits non-zero', async () => {
    const p = start({ GATEWAY_PORT: 'x', LOG_LEVEL: 'loud' });
    assert.equal(await p.exited, 2);
    assert.match(p.output().stderr, /GATEWAY_PORT.*LOG_LEVEL|LOG_LEVEL.*GATEWAY_PORT/);
  });
});
