/**
 * A test file that ends before stopping the services it started (its stack never warmed up, a
 * test was cancelled at its time limit) leaves none of them running: test/helpers/services.ts
 * kills them when the test process exits, or is stopped by a signal (node's test runner stops a
 * file's process with SIGTERM when the runner itself is stopped). Seen before: services reparented
 * to init, still running 40 minutes after their test file had ended.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';

const services = new URL('../helpers/services.ts', import.meta.url).href;
const signals = new URL('../helpers/signals.ts', import.meta.url).href;
const gatewayEnv = { GATEWAY_PORT: '0', AUTHZ_ADDRESSES: '127.0.0.1:9', CORE_ORIGINS: 'http://127.0.0.1:9' };

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The pids the test process left running: the service's, or npm's and the node it runs. */
  left: number[];
}

/**
 * What the test process starts, and the line it prints once it runs: a service
 * (test/helpers/services.ts), or `npm run gateway` in a process group of its own as the signal
 * tests start `npm start` (test/helpers/signals.ts), printing npm's pid and its node's.
 */
const starts = {
  service: `import { runService } from ${JSON.stringify(services)};
const s = runService('gateway', ${JSON.stringify(gatewayEnv)});
await new Promise((r) => setTimeout(r, 1500));
process.stdout.write(s.child.exitCode === null && s.child.signalCode === null ? String(s.child.pid) + '\\n' : 'the service had already exited\\n');`,
  npm: `import { npm, nodeOf } from ${JSON.stringify(signals)};
const p = npm(['run', 'gateway'], ${JSON.stringify(gatewayEnv)});
await new Promise((r) => setTimeout(r, 3000));
process.stdout.write(p.child.exitCode === null ? p.child.pid + ' ' + nodeOf(p.child.pid, 'bin/services/gateway.ts') + '\\n' : 'npm had already exited\\n');`,
};

/**
 * A test process that starts a gateway (it needs no database: it listens whatever its upstreams)
 * and prints its pid (once it is known to be running, so that a gateway failing to start cannot
 * pass), then ends as `end` says without stopping it: `exit` calls process.exit(3),
 * a signal is sent to that process alone (not its process group, which the service shares).
 */
async function leaveAService(
  end: 'exit' | NodeJS.Signals,
  how: keyof typeof starts = 'service',
): Promise<Ended> {
  const dir = await mkdtemp(join(tmpdir(), 'orphans-'));
  const script = join(dir, 'leaves-a-service.mts');
  const last = end === 'exit' ? 'process.exit(3);' : 'setInterval(() => {}, 1000);';
  await writeFile(script, `${starts[how]}\n${last}\n`);
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (end !== 'exit' && out.endsWith('\n')) child.kill(end);
    });
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((r) =>
      child.on('exit', (c, s) => r([c, s])),
    );
    const left = out.trim().split(' ').map(Number);
    assert.ok(
      left.length > 0 && left.every((pid) => Number.isInteger(pid) && pid > 0),
      `pids printed: ${out}`,
    );
    return { code, signal, left };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Whether `pid` is still running a few seconds on; a survivor is killed so that none is left. */
async function leftRunning(pid: number): Promise<boolean> {
  for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
  const left = alive(pid);
  if (left) process.kill(pid, 'SIGKILL');
  return left;
}

// Each test starts its own test process and service, and mostly waits: they run side by side.
describe('services started by a test process', { concurrency: true }, () => {
  it('are gone once that process exits without stopping them', async () => {
    const ended = await leaveAService('exit');
    assert.equal(ended.code, 3, 'the test process ended without stopping its service');
    assert.equal(await leftRunning(ended.left[0] as number), false, 'the service was left running');
  });

  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    it(`are gone once that process is stopped by ${signal}, which still ends it`, async () => {
      const ended = await leaveAService(signal);
      assert.equal(await leftRunning(ended.left[0] as number), false, 'the service was left running');
      assert.deepEqual([ended.code, ended.signal], [null, signal], 'the test process ended by the signal');
    });
  }
});

describe('npm runs started by a test process in a process group of their own (the signal tests)', {
  concurrency: true,
}, () => {
  for (const end of ['exit', 'SIGTERM'] as const) {
    it(`are stopped, npm and its node, once that process ends by ${end}`, async () => {
      const ended = await leaveAService(end, 'npm');
      assert.equal(ended.left.length, 2, 'npm and the node it runs');
      // Every pid is checked (and a survivor killed) before any assertion can end the test.
      const survivors: number[] = [];
      for (const pid of ended.left) if (await leftRunning(pid)) survivors.push(pid);
      assert.deepEqual(survivors, [], 'left running');
    });
  }
});
