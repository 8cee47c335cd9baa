/**
 * A test file that ends before stopping the services it started (its stack never warmed up, a
 * test was cancelled at its time limit) leaves none of them running: test/helpers/services.ts
 * kills them when the test process exits. Seen before: services reparented to init, still
 * running 40 minutes after their test file had ended.
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

describe('services started by a test process', () => {
  it('are gone once that process exits without stopping them', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'orphans-'));
    const script = join(dir, 'leaves-a-service.mts');
    // A gateway needs no database: it starts listening whatever its upstreams.
    await writeFile(
      script,
      `import { runService } from ${JSON.stringify(services)};
const s = runService('gateway', { GATEWAY_PORT: '0', AUTHZ_ADDRESSES: '127.0.0.1:9', CORE_ORIGINS: 'http://127.0.0.1:9' });
await new Promise((r) => setTimeout(r, 1500));
process.stdout.write(String(s.child.pid) + '\\n');
process.exit(3);
`,
    );
    try {
      const child = spawn(process.execPath, ['--import', 'tsx', script], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let out = '';
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
      });
      const code = await new Promise<number | null>((r) => child.on('exit', r));
      assert.equal(code, 3, 'the test process ended without stopping its service');
      const pid = Number(out.trim());
      assert.ok(Number.isInteger(pid) && pid > 0, `the service's pid was printed: ${out}`);
      for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
      const left = alive(pid);
      if (left) process.kill(pid, 'SIGKILL');
      assert.equal(left, false, 'the service was left running');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
