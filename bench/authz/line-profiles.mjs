/**
 * A preload for the authz bench's servers process: one main-thread CPU profile per bench line
 * (warm-up and measured run alike), started and stopped on the driver's own `probe-start` and
 * `probe-stop` messages (bench/authz/servers.ts), written as `line-<n>.cpuprofile` to
 * `<tmpdir>/edge-line-profiles` (emptied first) in the order the lines run (for a round: the floor's warm-up 0 and
 * run 1, the read's answer 2-3, transfer 4-5, read 6-7, deny 8-9, ...). 100 µs sampling. Compare
 * two with `npx tsx bench/lib/profile-summary.ts <line-5> --minus <line-1>`.
 *   npx tsx bench/authz/run.ts --no-plugin 1 --no-search 1 --requests 5000 \
 *     --edge-node-flag --import=./bench/authz/line-profiles.mjs
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isMainThread } from 'node:worker_threads';

// The servers' worker threads (audit, shadow) load it too: only the thread answering Checks profiles.
if (isMainThread) {
  const dir = join(tmpdir(), 'edge-line-profiles');
  // A run's lines only: the previous run's profiles go.
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 100 });
  let line = 0;
  process.on('message', (m) => {
    if (m?.t === 'probe-start') session.post('Profiler.start');
    if (m?.t === 'probe-stop') {
      const file = join(dir, `line-${line++}.cpuprofile`);
      session.post('Profiler.stop', (err, r) => {
        if (err) process.stderr.write(`line profile not written: ${err.message}\n`);
        else writeFileSync(file, JSON.stringify(r.profile));
      });
    }
  });
  process.stderr.write(`edge line profiles: ${dir}\n`);
}
