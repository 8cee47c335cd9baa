/** What identity routes share: dependencies, clock, and small helpers used by every route. */
import type { Logger } from 'pino';
import type { Db, TxClient } from '../../shared/db/pool.ts';
import { appendAudit } from '../../shared/audit.ts';
import type { RequestContext } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { PinHasher } from './pin.ts';
import { lookupKey, SecretStore, type TenantSecrets } from './secrets.ts';
import { defaultSmsSender, type SmsSender } from './sms.ts';

/** Options a caller of buildCore may give identity (tests inject a capturing SMS sender). */
export interface IdentityOptions {
  sms?: SmsSender;
  argonConcurrency?: number;
  /** PIN checks allowed to wait for the argon2 gate (default pin.ts argonMaxQueue). */
  argonMaxQueue?: number;
}

export interface IdentityDeps {
  db: Db;
  keys: KeyStore;
  log: Logger;
  now: () => number;
  sms: SmsSender;
  secrets: SecretStore;
  pins: PinHasher;
  /** Background work (rehash) still running, so shutdown and tests can wait for it. */
  background: Set<Promise<unknown>>;
}

export function identityDeps(
  base: { db: Db; keys: KeyStore; log: Logger; now: () => number; dataDir?: string },
  opts: IdentityOptions = {},
): IdentityDeps {
  return {
    db: base.db,
    keys: base.keys,
    log: base.log.child({ component: 'identity' }),
    now: base.now,
    sms: opts.sms ?? defaultSmsSender(base.dataDir),
    secrets: new SecretStore(base.db, base.keys),
    pins: new PinHasher({
      ...(opts.argonConcurrency !== undefined ? { concurrency: opts.argonConcurrency } : {}),
      ...(opts.argonMaxQueue !== undefined ? { maxQueue: opts.argonMaxQueue } : {}),
    }),
    background: new Set(),
  };
}

/** Where the attempt comes from: the edge's x-client-ip, else the socket peer. */
export function clientIpOf(ctx: RequestContext<unknown, unknown, unknown>): string {
  return ctx.identity.clientIp ?? ctx.req.socket.remoteAddress ?? 'unknown';
}

/** SPEC 5.2: the rate-limit and lookup key of a phone is an HMAC of tenant and phone. */
export function phoneKeyOf(s: TenantSecrets, tenantId: string, phone: string): Buffer {
  return lookupKey(s.lookup, 'phone', tenantId, phone);
}

/** A short, non-reversible reference to a phone for audit records (never the number). */
export function phoneRef(phoneKey: Buffer): string {
  return `phk_${phoneKey.subarray(0, 12).toString('base64url')}`;
}

export interface AuthAudit {
  tenantId: string;
  action: string;
  actor: { type: string; id: string };
  target: { type: string; id: string };
  allow: boolean;
  attrs: Record<string, unknown>;
  aal?: number;
  requestId: string;
}

/** One audit record per authentication decision (SPEC 2.8, 6.3); never a PIN, OTP or token. */
export async function auditAuth(q: TxClient, a: AuthAudit, now: number): Promise<void> {
  await appendAudit(q, [
    {
      tenantId: a.tenantId,
      actor: a.actor,
      action: a.action,
      target: a.target,
      decision: { allow: a.allow, ...(a.aal !== undefined ? { aal: a.aal } : {}), trace_id: a.requestId },
      attrs: a.attrs,
      ts: new Date(now),
    },
  ]);
}

/** Track a background task so it can be awaited; failures are logged, never thrown. */
export function inBackground(deps: IdentityDeps, what: string, task: () => Promise<unknown>): void {
  const p = task().catch((err: unknown) => deps.log.warn({ err: (err as Error).message }, `${what} failed`));
  deps.background.add(p);
  void p.finally(() => deps.background.delete(p));
}
