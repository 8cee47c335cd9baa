/**
 * Issue 15 item 2 in tests: `npm start` / `npm test` spawned as a shell runs a foreground job,
 * signalled in each way a user, a terminal or a process manager does, then required to be gone.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  alive,
  childEnv,
  commandOf,
  onTestProcessEnd,
  processTree,
  repoRoot,
  waitFor,
  watch,
  type Started,
} from './process.ts';

/** Issue 15 item 2: the whole tree is gone within 10 s of the signal. */
const stopDeadlineMs = 10_000;

export type Target = 'npm' | 'node' | 'group';
export interface Case {
  name: string;
  target: Target;
  signal: NodeJS.Signals;
}

export const cases: Case[] = [
  { name: 'SIGINT to the npm process', target: 'npm', signal: 'SIGINT' },
  { name: 'SIGTERM to the npm process', target: 'npm', signal: 'SIGTERM' },
  { name: 'SIGINT to node', target: 'node', signal: 'SIGINT' },
  { name: 'SIGTERM to node', target: 'node', signal: 'SIGTERM' },
  { name: 'Ctrl-C (SIGINT to the foreground process group)', target: 'group', signal: 'SIGINT' },
  {
    name: 'npm killed outright (SIGKILL): node notices its parent is gone',
    target: 'npm',
    signal: 'SIGKILL',
  },
];

/**
 * The process groups of `npm` runs not yet ended: Ctrl-C'd (SIGINT to the group, which stops
 * `npm start` with its PostgreSQL as a user's would) when this test process ends first.
 */
const groups = new Set<number>();
onTestProcessEnd(() => {
  for (const group of groups) {
    try {
      process.kill(-group, 'SIGINT');
    } catch {
      // already gone
    }
  }
});

/** `npm <args>` in its own process group, as a shell runs a foreground job. */
export function npm(args: string[], env: Record<string, string>): Started {
  const started = watch(
    spawn('npm', args, {
      cwd: repoRoot,
      env: childEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    }),
  );
  const group = started.child.pid;
  if (group !== undefined) {
    groups.add(group);
    void started.exited.then(() => groups.delete(group));
  }
  return started;
}

/** The node process npm runs (`exec` in the script: npm's own child). */
export function nodeOf(npmPid: number, script: string): number {
  const pid = processTree(npmPid).find((p) => p !== npmPid && commandOf(p).includes(script));
  assert.ok(pid, `node running ${script} under npm`);
  return pid;
}

export async function postmasterPid(pgDir: string): Promise<number> {
  return Number((await readFile(join(pgDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
}

function send(c: Case, p: Started, node: number): void {
  const npmPid = p.child.pid as number;
  if (c.target === 'group') process.kill(-npmPid, c.signal);
  else process.kill(c.target === 'npm' ? npmPid : node, c.signal);
}

/** Signal, then require every process of `tree` gone within the deadline; survivors are killed. */
export async function stopsWithin(c: Case, p: Started, node: number, tree: number[]): Promise<void> {
  send(c, p, node);
  try {
    await waitFor(() => (tree.some(alive) ? undefined : true), stopDeadlineMs);
  } catch {
    const left = tree.filter(alive).map((pid) => `${pid} ${commandOf(pid)}`);
    assert.fail(`${c.name}: still running after ${stopDeadlineMs} ms: ${left.join('; ')}`);
  } finally {
    for (const pid of tree.filter(alive)) process.kill(pid, 'SIGKILL');
  }
}
