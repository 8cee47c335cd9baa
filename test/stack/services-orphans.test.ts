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
  /** The pid of the service the test process left running. */
  service: number;
}

/**
 * A test process that starts a gateway (it needs no database: it listens whatever its upstreams)
 * and prints its pid (once it is known to be running, so that a gateway failing to start cannot
 * pass), then ends as `end` says without stopping it: `exit` calls process.exit(3),
 * a signal is sent to that process alone (not its process group, which the service shares).
 */
async function leaveAService(end: 'exit' | NodeJS.Signals): Promise<Ended> {
  const dir = await mkdtemp(join(tmpdir(), 'orphans-'));
  const script = join(dir, 'leaves-a-service.mts');
  const last = end === 'exit' ? 'process.exit(3);' : 'setInterval(() => {}, 1000);';
  await writeFile(
    script,
    `import { runService } from ${JSON.stringify(services)};
const s = runService('gateway', { GATEWAY_PORT: '0', AUTHZ_ADDRESSES: '127.0.0.1:9', CORE_ORIGINS: 'http://127.0.0.1:9' });
await new Promise((r) => setTimeout(r, 1500));
process.stdout.write(s.child.exitCode === null && s.child.signalCode === null ? String(s.child.pid) + '\\n' : 'the service had already exited\\n');
${last}
`,
  );
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
    const service = Number(out.trim());
    assert.ok(Number.isInteger(service) && service > 0, `the service's pid was printed: ${out}`);
    return { code, signal, service };
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

describe('services started by a test process', () => {
  it('are gone once that process exits without stopping them', async () => {
    const ended = await leaveAService('exit');
    assert.equal(ended.code, 3, 'the test process ended without stopping its service');
    assert.equal(await leftRunning(ended.service), false, 'the service was left running');
  });

  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    it(`are gone once that process is stopped by ${signal}, which still ends it`, async () => {
      const ended = await leaveAService(signal);
      assert.equal(await leftRunning(ended.service), false, 'the service was left running');
      assert.deepEqual([ended.code, ended.signal], [null, signal], 'the test process ended by the signal');
    });
  }
});
