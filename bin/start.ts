/**
 * `npm start`: the whole stack in one process tree. Embedded PostgreSQL (unless DATABASE_URL
 * is set), migrations, the idempotent demo seed, core HTTP, edge authz gRPC and the dev
 * gateway; one banner; SIGINT/SIGTERM stops everything, PostgreSQL included, within 10 s.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { startStack, StartError, type Stack } from './stack.ts';

/** SIGINT/SIGTERM must finish within 10 s (issue: clean stop); we force exit just before. */
const shutdownDeadlineMs = 9_500;
/** How often we check that the process that started us is still there. */
const parentCheckMs = 500;

function fail(message: string, code = 1): never {
  process.stderr.write(`error: ${message}\n`);
  process.exit(code);
}

function dataLine(config: Config, stack: Stack): string {
  const demo = `demo credentials: ${join(config.dataDir, 'demo.json')}`;
  if (!stack.embedded) return `DATABASE_URL (${demo})`;
  // Issue 15 item 1: as root under a 0700 home the cluster lives where the postgres user can reach it.
  if (stack.embedded.relocated)
    return `${stack.embedded.dataDir} (PostgreSQL, linked from ${join(config.dataDir, 'pg')}; ${demo})`;
  return `${stack.embedded.dataDir} (${demo})`;
}

function banner(config: Config, stack: Stack): string {
  const gw = `http://127.0.0.1:${stack.ports.gateway}`;
  return [
    '',
    'payments platform is up',
    `  gateway (point clients here): ${gw}`,
    `  API docs:                     ${gw}/v1/docs`,
    // Issue 15 item 3: the seeded demo customer's token in one call (Authorize on the docs page with it).
    `  customer token (demo):        POST ${gw}/customers/auth/login {tenantId, phone, pin} from demo.json's customer → accessToken`,
    // Passkeys need a domain as relying party (browsers refuse an IP address): localhost, not 127.0.0.1.
    `  staff sign-in (passkeys):     http://localhost:${stack.ports.gateway}/staff (first time: open http://localhost:${stack.ports.gateway} + staff.admin.enrolmentPath from demo.json)`,
    `  data:                         ${dataLine(config, stack)}`,
    `  internal: core 127.0.0.1:${stack.ports.core}, edge authz gRPC 127.0.0.1:${stack.ports.authz} (dev gateway stands in for Envoy; production runs deploy/envoy/envoy.yaml)`,
    '  Ctrl-C stops everything.',
    '',
  ].join('\n');
}

/**
 * Stops on SIGINT, SIGTERM or SIGHUP, and when the process that started us goes away (a signal
 * to npm alone, or npm killed). A signal during start-up stops the stack as soon as it is built;
 * the deadline holds either way, and process.exit takes PostgreSQL with it (core/db/embedded.ts).
 */
class Lifecycle {
  private stack: Stack | undefined;
  private reason: string | undefined;

  constructor() {
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
      process.on(signal, () => this.stop(signal));
    const parent = process.ppid;
    setInterval(() => {
      if (process.ppid !== parent) this.stop('parent process exited');
    }, parentCheckMs).unref();
  }

  get stopping(): boolean {
    return this.reason !== undefined;
  }

  stop(reason: string): void {
    if (this.reason) return;
    this.reason = reason;
    process.stdout.write(`\n${reason}: stopping…\n`);
    setTimeout(() => fail('shutdown took too long; forcing exit'), shutdownDeadlineMs).unref();
    if (this.stack) this.finish(this.stack);
  }

  /** The stack is up: stop it at once if we were told to while it started. */
  started(stack: Stack): boolean {
    this.stack = stack;
    if (this.reason) this.finish(stack);
    return !this.reason;
  }

  private finish(stack: Stack): void {
    stack.stop().then(
      () => process.exit(0),
      (err: unknown) => fail(`shutdown error: ${(err as Error).message}`),
    );
  }
}

async function main(): Promise<void> {
  const lifecycle = new Lifecycle();
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
    // startStack stopped what it had built; a failure caused by our own stop is no error.
    if (lifecycle.stopping) process.exit(0);
    fail(err instanceof StartError ? err.message : `start-up failed: ${(err as Error).message}`);
  }
  // Banner only for a stack that answers (issue 15 item 9: startStack returns once warm).
  if (lifecycle.started(stack)) process.stdout.write(`${banner(config, stack)}\n`);
}

main().catch((err: unknown) => fail((err as Error).message));
