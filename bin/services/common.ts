/**
 * What every separately deployed process shares: reading its configuration from the environment
 * (one line per problem, exit 2), trusted policy signers, and a SIGTERM/SIGINT drain that stops
 * taking new work, lets work in flight finish and exits within `shutdownDeadlineMs`.
 */
import type { KeyObject } from 'node:crypto';
import type { Logger } from 'pino';
import { defaultTrustFile, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { createLogger } from '../../shared/log.ts';
import {
  loadServiceConfig,
  ServiceConfigError,
  type LogLevel,
  type ServiceConfig,
  type ServiceKind,
} from '../service-config.ts';

/** Each process stops within 10 s of SIGTERM (issue: rollouts); forced just before. */
export const shutdownDeadlineMs = 9_500;

export function fail(message: string, code = 1): never {
  process.stderr.write(`error: ${message}\n`);
  process.exit(code);
}

/** The process's configuration, or exit 2 listing every problem. */
export function configOrExit(kind: ServiceKind): Readonly<ServiceConfig> {
  try {
    return loadServiceConfig(kind, process.env);
  } catch (err) {
    if (err instanceof ServiceConfigError) fail(`invalid configuration: ${err.problems.join('; ')}`, 2);
    throw err;
  }
}

export function loggerOf(config: ServiceConfig, component: string): Logger {
  return createLogger((config.values.LOG_LEVEL ?? 'info') as LogLevel).child({
    component,
    mode: config.mode,
  });
}

/**
 * Trusted policy-bundle signers: POLICY_TRUSTED_KEYS (a JWKS file) when set; in development the
 * repository's trust file, which lists the development key. Production requires the variable, so
 * the development key is trusted there only when an operator lists it.
 */
export function trustedSigners(config: ServiceConfig): Promise<KeyObject[]> {
  return loadTrustedKeys(config.values.POLICY_TRUSTED_KEYS ?? defaultTrustFile);
}

/**
 * Until onShutdown takes over: SIGTERM or SIGINT ends a process still starting (waiting for its
 * database) at once with exit 0, as nothing is served or in flight yet; without it the signal
 * killed the process (no exit code). Returns the function that removes these handlers.
 */
export function exitWhileStarting(log: Logger): () => void {
  const exit = (signal: string) => {
    log.info({ signal }, 'stopping before serving');
    process.exit(0);
  };
  const onTerm = () => exit('SIGTERM');
  const onInt = () => exit('SIGINT');
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onInt);
  return () => {
    process.off('SIGTERM', onTerm);
    process.off('SIGINT', onInt);
  };
}

/** On SIGTERM or SIGINT run `drain` once, then exit 0 (or 1 if it failed or took too long). */
export function onShutdown(log: Logger, drain: () => Promise<void>): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping: no new work, finishing what is in flight');
    setTimeout(() => fail('shutdown took too long; forcing exit'), shutdownDeadlineMs).unref();
    drain().then(
      () => process.exit(0),
      (err: unknown) => fail(`shutdown error: ${(err as Error).message}`),
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
