/** Child processes in stack tests: `npm start` (or bin/start.ts) spawned, watched and inspected. */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';

export const repoRoot = new URL('../../', import.meta.url);

export interface Started {
  child: ChildProcess;
  exited: Promise<number | null>;
  output(): { stdout: string; stderr: string };
}

/** Watch a spawned child's output and exit. */
export function watch(child: ChildProcess): Started {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, output: () => ({ stdout, stderr }) };
}

/** The environment of a child: PATH and HOME only, plus `env` (no variables of ours leak in). */
export function childEnv(env: Record<string, string>): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    TMPDIR: process.env.TMPDIR ?? '/tmp',
    LOG_LEVEL: 'warn',
    ...env,
  };
}

/** `bin/start.ts` as `npm start` runs it, with `env`. */
export function startProcess(env: Record<string, string>): Started {
  return watch(
    spawn(process.execPath, ['--import', 'tsx', 'bin/start.ts'], {
      cwd: repoRoot,
      env: childEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
}

export async function waitFor<T>(fn: () => T | undefined | Promise<T | undefined>, ms: number): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Parent of every live process (Linux /proc). */
function parents(): Map<number, number> {
  const out = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // Field 4 of /proc/PID/stat, after the parenthesised command (which may hold spaces).
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      out.set(Number(name), ppid);
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** `pid` and every live process below it. */
export function processTree(...pids: number[]): number[] {
  const ppids = parents();
  const tree = new Set(pids);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, ppid] of ppids) {
      if (tree.has(ppid) && !tree.has(pid)) {
        tree.add(pid);
        grew = true;
      }
    }
  }
  return [...tree];
}

/** The command line of a live process. */
export function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

/** Whether nothing listens on 127.0.0.1:port. */
export async function portFree(port: number): Promise<boolean> {
  const srv = createServer();
  const free = await new Promise<boolean>((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (free) await new Promise<void>((r) => srv.close(() => r()));
  return free;
}

/**
 * Run `kill` when this test process ends, whether it exits or is stopped by a signal: a test file
 * that ends before its own cleanup (a stack that never warmed up, a test cancelled at its time
 * limit) would otherwise leave what it started running under init, holding ports and databases.
 * A signal ends a process without 'exit' (node's test runner stops a file's process with SIGTERM
 * when it is itself stopped): `kill` runs, then the signal ends this process as it would have
 * once no other handler is left for it.
 */
export function onTestProcessEnd(kill: () => void): void {
  process.once('exit', kill);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    process.once(signal, () => {
      kill();
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    });
  }
}
