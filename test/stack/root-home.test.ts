/**
 * Issue 15 item 1: as root (PostgreSQL then runs as the `postgres` user), a checkout or DATA_DIR
 * inside a 0700 directory such as /root still works: the binaries run from a root-owned cache,
 * the data lives where that user can reach it, keyed by the requested path, and persists.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import {
  link,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  readlink,
  realpath,
  rm,
  symlink,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import {
  binaryCacheRoot,
  installedBinaries,
  relocatedDataRoot,
  relocatedDir,
} from '../../core/db/embedded-access.ts';
import { startEmbedded } from '../../core/db/embedded.ts';
import { freePort } from '../../shared/net.ts';
import { startProcess, waitFor } from '../helpers/process.ts';

const asRoot = process.getuid?.() === 0;
const skip = asRoot ? false : 'PostgreSQL runs as another user only when we are root';

/** The cluster's system identifier (pg_control's first 8 bytes): new on every initdb. */
async function systemIdentifier(dataDir: string): Promise<string> {
  return (await readFile(join(dataDir, 'global', 'pg_control'))).subarray(0, 8).toString('hex');
}

/** A 0700 directory, like /root in most containers. */
async function privateDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'home-'));
}

/** Hard-link a tree (cheap, same inodes and modes); symlinks are recreated as they were. */
async function linkTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const [src, dst] = [join(from, entry.name), join(to, entry.name)];
    if (entry.isDirectory()) await linkTree(src, dst);
    else if (entry.isSymbolicLink()) await symlink(await readlink(src), dst);
    else await link(src, dst);
  }
}

describe('embedded PostgreSQL as root under a 0700 directory', { skip }, () => {
  it('relocates DATA_DIR/pg where the postgres user can reach it, links it, keeps it between runs and starts afresh once DATA_DIR is deleted', async () => {
    const home = await privateDir();
    const requested = join(home, 'clone', '.data', 'pg');
    const target = relocatedDir(requested);
    try {
      const first = await startEmbedded({ dir: requested, port: await freePort() });
      await first.stop();
      assert.equal(first.relocated, true);
      assert.equal(first.dataDir, target);
      assert.ok(target.startsWith(`${relocatedDataRoot}/`));
      assert.equal(await readlink(requested), target, 'DATA_DIR/pg shows where the data is');
      assert.equal((await lstat(target)).mode & 0o777, 0o700);
      const id = await systemIdentifier(target);

      const second = await startEmbedded({ dir: requested, port: await freePort() });
      await second.stop();
      assert.equal(second.dataDir, target);
      assert.equal(await systemIdentifier(target), id, 'the same cluster, not a new one');

      // Another checkout's data is its own.
      assert.notEqual(relocatedDir(join(home, 'other-clone', '.data', 'pg')), target);

      await rm(join(home, 'clone', '.data'), { recursive: true });
      const third = await startEmbedded({ dir: requested, port: await freePort() });
      await third.stop();
      assert.notEqual(await systemIdentifier(target), id, 'a deleted DATA_DIR starts afresh');
    } finally {
      await rm(home, { recursive: true, force: true });
      await rm(target, { recursive: true, force: true });
    }
  });

  it('runs binaries the postgres user cannot reach from a root-owned cache keyed by version', async () => {
    const home = await privateDir();
    const data = await mkdtemp(join(tmpdir(), 'data-'));
    try {
      const nativeDir = join(home, 'node_modules', 'native');
      await linkTree((await installedBinaries()).nativeDir, nativeDir);
      const pg = await startEmbedded({ dir: join(data, 'pg'), port: await freePort(), nativeDir });
      try {
        assert.equal(pg.relocated, false, 'a reachable DATA_DIR stays where it is');
        const pid = (await readFile(join(data, 'pg', 'postmaster.pid'), 'utf8')).split('\n')[0];
        const exe = await realpath(`/proc/${pid}/exe`);
        assert.ok(exe.startsWith(`${binaryCacheRoot}/postgres-`), exe);
        assert.ok(existsSync(join(dirname(dirname(exe)), '.complete')));
      } finally {
        await pg.stop();
      }
    } finally {
      await rm(home, { recursive: true, force: true });
      await rm(data, { recursive: true, force: true });
    }
  });

  it('npm start prints where the relocated data lives', async () => {
    const home = await privateDir();
    const dataDir = join(home, 'clone', '.data');
    const p = startProcess({ DATA_DIR: dataDir, GATEWAY_PORT: '0', CORE_PORT: '0', AUTHZ_PORT: '0' });
    try {
      const line = await waitFor(
        () => /data: +(\S+) \(PostgreSQL, linked from (\S+);/.exec(p.output().stdout) ?? undefined,
        90_000,
      );
      assert.equal(line[1], relocatedDir(join(dataDir, 'pg')));
      assert.equal(line[2], join(dataDir, 'pg'));
      p.child.kill('SIGTERM');
      assert.equal(await p.exited, 0, p.output().stderr);
    } finally {
      p.child.kill('SIGKILL');
      await rm(home, { recursive: true, force: true });
      await rm(relocatedDir(join(dataDir, 'pg')), { recursive: true, force: true });
    }
  });
});
