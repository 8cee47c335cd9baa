/**
 * The separately deployed processes (`bin/services/*.ts`: migrate, core, edge, gateway, bootstrap) as an
 * operator runs them: spawned as their own OS processes with only the environment given (no
 * variable of the test runner leaks in), their output kept for assertions and diagnosis.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { newWebhookSecret } from '../../core/admin/webhooks/sign.ts';
import { defaultTrustFile } from '../../policy/runtime/bundle.ts';
import { call } from './http.ts';
import { onTestProcessEnd } from './process.ts';

const root = new URL('../../', import.meta.url);

export type ServiceKind = 'migrate' | 'core' | 'edge' | 'gateway' | 'bootstrap';

export interface Service {
  kind: ServiceKind;
  child: ChildProcess;
  /** The exit code (null when ended by a signal). */
  exited: Promise<number | null>;
  /** stdout and stderr so far, interleaved. */
  output(): string;
}

/**
 * Issue 15 item 4: a core the tests run checks its responses against their declared schemas;
 * production refuses the check, so a MODE=production core runs as an operator's would.
 */
function testOnlyEnv(kind: ServiceKind, env: Record<string, string>): Record<string, string> {
  return kind === 'core' && env.MODE !== 'production' ? { RESPONSE_SCHEMA_CHECK: '1' } : {};
}

/** Every service this test process started that has not exited: killed when this process ends. */
const running = new Set<ChildProcess>();
onTestProcessEnd(() => {
  for (const child of running) child.kill('SIGKILL');
});

export function runService(kind: ServiceKind, env: Record<string, string>): Service {
  const child = spawn(process.execPath, ['--import', 'tsx', `bin/services/${kind}.ts`], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/tmp',
      LOG_LEVEL: 'warn',
      ...testOnlyEnv(kind, env),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  running.add(child);
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      running.delete(child);
      resolve(code);
    }),
  );
  return { kind, child, exited, output: () => out };
}

/**
 * Poll `fn` (errors count as "not yet") until it gives a value or `ms` pass. `what` names what
 * is awaited; as a function it is read when the wait fails, so it can tell what happened meanwhile.
 */
export async function until<T>(
  fn: () => Promise<T | undefined>,
  ms: number,
  what: string | (() => string),
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end)
      throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A 32-byte key as production configuration takes it (base64). */
export const key32 = (): string => randomBytes(32).toString('base64');

/** Every secret production requires, freshly generated, for core and edge processes on `databaseUrl`. */
export function productionEnv(
  databaseUrl: string,
  smsUrl = 'http://127.0.0.1:9/sms',
): Record<string, string> {
  return {
    MODE: 'production',
    DATABASE_URL: databaseUrl,
    MASTER_KEY: key32(),
    EDGE_SHARED_SECRET: randomBytes(32).toString('base64url'),
    CHALLENGE_KEY: key32(),
    API_KEY_SEAL_KEY: key32(),
    POLICY_TRUSTED_KEYS: defaultTrustFile,
    SMS_WEBHOOK_URL: smsUrl,
    SMS_WEBHOOK_SECRET: newWebhookSecret(),
    PRIVATE_TARGETS_ALLOWED: '127.0.0.1/32',
    ISSUER_URL: 'https://payments.test',
    DEPLOYMENT_REGION: 'KE',
  };
}

/** What an edge process reads of `productionEnv`: never the master key or the SMS secret. */
export function edgeEnv(env: Record<string, string>): Record<string, string> {
  const read = [
    'MODE',
    'DATABASE_URL',
    'EDGE_SHARED_SECRET',
    'CHALLENGE_KEY',
    'API_KEY_SEAL_KEY',
    'POLICY_TRUSTED_KEYS',
    'ISSUER_URL',
  ];
  return Object.fromEntries(read.map((k) => [k, env[k] ?? '']));
}

/** The last output of each process, and how it ended if it has, for a failure message. */
export function outputsOf(procs: Record<string, Service>): string {
  return Object.entries(procs)
    .map(([n, p]) => {
      const { exitCode, signalCode } = p.child;
      const ended =
        exitCode !== null ? ` (exited with code ${exitCode})` : signalCode ? ` (ended by ${signalCode})` : '';
      return `--- ${n}${ended}\n${p.output().slice(-3000)}`;
    })
    .join('\n');
}

/** The last answer (or error) of each readiness URL being awaited, for the failure message of any wait. */
const lastAnswers = new Map<string, string>();

async function isReady(origin: string, path: string): Promise<boolean> {
  const url = `${origin}${path}`;
  try {
    const r = await call(origin, 'GET', path);
    lastAnswers.set(url, `${r.status} ${r.text.slice(0, 500)}`);
    return r.status === 200;
  } catch (err) {
    lastAnswers.set(url, `no answer: ${(err as Error).message}`);
    return false;
  }
}

/**
 * Until `origin` answers 200 on `path` (within `ms`). A failure says, as they are when it fails,
 * what every readiness URL still awaited last answered, and each process's state and output; it
 * fails at once when `service`, the process that serves `origin`, has exited.
 */
export async function untilServing(
  origin: string,
  path: string,
  ms: number,
  procs: Record<string, Service>,
  service?: Service,
): Promise<void> {
  const url = `${origin}${path}`;
  const why = () =>
    `${url}\n${[...lastAnswers].map(([u, a]) => `${u} last answered: ${a}`).join('\n')}\n${outputsOf(procs)}`;
  for (const end = Date.now() + ms; ; await new Promise((r) => setTimeout(r, 200))) {
    if (await isReady(origin, path)) {
      lastAnswers.delete(url);
      return;
    }
    if (service && (service.child.exitCode !== null || service.child.signalCode !== null))
      throw new Error(`the ${service.kind} serving ${url} exited before it was ready: ${why()}`);
    if (Date.now() > end) throw new Error(`timed out waiting for ${why()}`);
  }
}

/** `migrate` run once on `databaseUrl` as an operator runs it before any service starts. */
export async function migrateAsOperator(databaseUrl: string): Promise<void> {
  const migrate = runService('migrate', {
    MODE: 'production',
    DATABASE_URL: databaseUrl,
    DEPLOYMENT_REGION: 'KE',
  });
  assert.equal(await migrate.exited, 0, migrate.output());
}
