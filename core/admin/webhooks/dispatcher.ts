/**
 * The webhook dispatcher (SPEC 6; issue 6 item 7): routes outbox events to subscribed endpoints
 * (one delivery per event and endpoint, in the outbox row's transaction of routing), then
 * delivers due deliveries signed the Standard Webhooks way. At-least-once; in order per
 * (endpoint, aggregate): a delivery waits while an earlier one of its aggregate is PENDING.
 * Failures back off exponentially with full jitter; after `maxAttempts` a delivery is DEAD and
 * so is its outbox row (retry through POST /v1/outbox/{id}:retry). Events whose headers say
 * `content-class: secret` are never routed to webhooks. Every attempt passes the SSRF guard
 * (./target.ts): a target that is or resolves to a private, loopback or metadata address fails
 * the attempt without a request (unless `allowPrivateTargets`, for tests and development).
 *
 * Every core instance runs a dispatcher over the one database (issue 23 item 6): one routes at a
 * time; a delivery is attempted by one dispatcher at a time under a lease (`lease_token`, with
 * `next_attempt_at` as its end, migration 0751), renewed before each send and required to record
 * the result. A dispatcher that dies holding leases loses them when they run out (2 × timeoutMs;
 * instance clocks must agree far closer than timeoutMs), and another one delivers again: a
 * receiver may see a message twice and deduplicates by `webhook-id`, which every redelivery keeps.
 */
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import type { Logger } from 'pino';
import { exclusiveJobs, exclusiveLockClass } from '../../db/exclusive.ts';
import type { Db, Queryable } from '../../../shared/db/pool.ts';
import type { KeyStore } from '../../keys/keys.ts';
import { signedHeaders } from './sign.ts';
import { secretsOf, type WebhookRow } from './store.ts';
import { TargetGuard } from './target.ts';

export interface DispatcherOptions {
  db: Db;
  keys: KeyStore;
  log: Logger;
  now?: () => number;
  random?: () => number;
  pollMs?: number;
  batchSize?: number;
  maxAttempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  timeoutMs?: number;
  /** Tests and the development stack only: deliver to loopback/private/link-local/CGNAT targets. Off by default. */
  allowPrivateTargets?: boolean;
  /** A guard of one's own (tests inject name resolution); overrides allowPrivateTargets. */
  targets?: TargetGuard;
  /** Counts deliveries this dispatcher dead-lettered (core's `webhook_deliveries_dead_lettered_total`, alerted on). */
  deadLettered?: { inc(): void };
}

export const defaultMaxAttempts = 8;

interface Claimed {
  id: string;
  outbox_id: string;
  attempts: number;
  webhook_id: string;
}

/** Delay before attempt n+1 after n failures: full jitter over min(max, base × 2^(n−1)), at least base/2. */
export function backoffMs(failures: number, baseMs: number, maxMs: number, random: () => number): number {
  const cap = Math.min(maxMs, baseMs * 2 ** Math.max(0, failures - 1));
  return Math.max(baseMs / 2, Math.floor(cap * random()));
}

export interface Attempt {
  ok: boolean;
  status: number | null;
  error: string | null;
  ms: number;
}

/** One signed POST through the SSRF guard (no redirects followed); never throws. */
export async function send(
  guard: TargetGuard,
  url: string,
  secrets: string[],
  id: string,
  nowMs: number,
  body: string,
  timeoutMs: number,
): Promise<Attempt> {
  const started = Date.now();
  try {
    const refused = guard.deliveryRefusal(new URL(url));
    if (refused) return { ok: false, status: null, error: refused, ms: Date.now() - started };
    const res = await request(url, {
      method: 'POST',
      headers: signedHeaders(secrets, id, Math.floor(nowMs / 1000), body),
      body,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      dispatcher: guard.dispatcher(),
      // The whole attempt (connect included) ends within timeoutMs, inside the delivery's lease.
      signal: AbortSignal.timeout(timeoutMs),
    });
    await res.body.text().catch(() => '');
    const ok = res.statusCode >= 200 && res.statusCode < 300;
    return {
      ok,
      status: res.statusCode,
      error: ok ? null : `HTTP ${res.statusCode}`,
      ms: Date.now() - started,
    };
  } catch (err) {
    return { ok: false, status: null, error: (err as Error).message.slice(0, 200), ms: Date.now() - started };
  }
}

export class Dispatcher {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly o: Required<Omit<DispatcherOptions, 'db' | 'keys' | 'log' | 'targets' | 'deadLettered'>> &
    Pick<DispatcherOptions, 'db' | 'keys' | 'log' | 'deadLettered'>;
  private readonly guard: TargetGuard;

  constructor(opts: DispatcherOptions) {
    this.o = {
      now: Date.now,
      random: Math.random,
      pollMs: 500,
      batchSize: 50,
      maxAttempts: defaultMaxAttempts,
      baseDelayMs: 1000,
      maxDelayMs: 3_600_000,
      timeoutMs: 5000,
      allowPrivateTargets: false,
      ...opts,
    };
    this.guard = opts.targets ?? new TargetGuard({ allowPrivateTargets: this.o.allowPrivateTargets });
  }

  start(): void {
    this.stopped = false;
    const loop = () => {
      if (this.stopped) return;
      this.running = this.tick()
        .catch((err: unknown) => this.o.log.warn({ err: (err as Error).message }, 'webhook dispatch failed'))
        .then(() => {
          if (!this.stopped) this.timer = setTimeout(loop, this.o.pollMs);
        });
    };
    loop();
  }

  /** Stop polling and wait for the attempt in flight; deliveries claimed but not yet attempted are released. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    await this.guard.close();
  }

  /** Route new events, then deliver what is due; returns the number of attempts made. */
  async tick(): Promise<number> {
    await this.route();
    return this.deliver();
  }

  /**
   * One router at a time across instances (a transaction-scoped advisory lock; the others skip
   * routing this tick): deliveries get their `seq` in outbox order, and a later event of an
   * aggregate can never be routed, and so delivered, ahead of an earlier one another router holds.
   * For the same reason the router waits for a row another transaction has locked (an operator's
   * retry) instead of skipping past it.
   */
  private async route(): Promise<void> {
    await this.o.db.tx(async (q) => {
      const { rows: lock } = await q.query<{ got: boolean }>(
        'SELECT pg_try_advisory_xact_lock($1, $2) AS got',
        [exclusiveLockClass, exclusiveJobs.outboxRouting],
      );
      if (lock[0]?.got !== true) return;
      const { rows } = await q.query<{
        id: string;
        tenant_id: string;
        aggregate: string;
        aggregate_id: string;
        event: string;
      }>(
        `SELECT id, tenant_id, aggregate, aggregate_id, event FROM outbox
          WHERE routed_at IS NULL AND status = 'PENDING' AND NOT (headers ? 'content-class' AND headers->>'content-class' = 'secret')
          ORDER BY created_at, id LIMIT $1 FOR UPDATE`,
        [this.o.batchSize],
      );
      const now = new Date(this.o.now());
      for (const e of rows) {
        const { rowCount } = await q.query(
          `INSERT INTO admin_webhook_deliveries (id, tenant_id, webhook_id, outbox_id, aggregate_key, next_attempt_at)
           SELECT gen_random_uuid(), w.tenant_id, w.id, $1, $2, $3 FROM admin_webhooks w
            WHERE w.tenant_id = $4 AND w.status <> 'DELETED' AND ($5 = ANY(w.events) OR '*' = ANY(w.events))
            ORDER BY w.id ON CONFLICT DO NOTHING`,
          [e.id, `${e.aggregate}:${e.aggregate_id}`, now, e.tenant_id, e.event],
        );
        await q.query(
          `UPDATE outbox SET routed_at = $2::timestamptz, status = CASE WHEN $3::boolean THEN 'PENDING' ELSE 'DELIVERED' END, processed_at = CASE WHEN $3::boolean THEN NULL ELSE $2::timestamptz END WHERE id = $1`,
          [e.id, now, (rowCount ?? 0) > 0],
        );
      }
    });
  }

  /** A lease covers one attempt (bounded by timeoutMs) with as much again to record it. */
  private leaseEnd(): Date {
    return new Date(this.o.now() + this.o.timeoutMs * 2);
  }

  /**
   * Claim due deliveries under a fresh lease token (SKIP LOCKED: two dispatchers never claim
   * the same row) and attempt them in order. Only the first PENDING delivery of each (endpoint,
   * aggregate) is due, so a later one waits while an earlier one is retried; a DEAD one no
   * longer counts. Deliveries left when the dispatcher stops are released for others at once.
   */
  private async deliver(): Promise<number> {
    const now = new Date(this.o.now());
    const token = randomUUID();
    const due = await this.o.db.tx(async (q) => {
      const { rows } = await q.query<Claimed>(
        `SELECT d.id, d.outbox_id, d.attempts, d.webhook_id FROM admin_webhook_deliveries d JOIN admin_webhooks w ON w.id = d.webhook_id
          WHERE d.status = 'PENDING' AND d.next_attempt_at <= $1 AND w.status = 'ACTIVE'
            AND NOT EXISTS (SELECT 1 FROM admin_webhook_deliveries e WHERE e.webhook_id = d.webhook_id AND e.aggregate_key = d.aggregate_key AND e.status = 'PENDING' AND e.seq < d.seq)
          ORDER BY d.seq LIMIT $2 FOR UPDATE OF d SKIP LOCKED`,
        [now, this.o.batchSize],
      );
      if (rows.length > 0)
        await q.query(
          'UPDATE admin_webhook_deliveries SET next_attempt_at = $2, lease_token = $3 WHERE id = ANY($1::uuid[])',
          [rows.map((r) => r.id), this.leaseEnd(), token],
        );
      return rows;
    });
    let attempted = 0;
    let next = 0;
    for (; next < due.length && !this.stopped; next++)
      if (await this.attempt(due[next] as Claimed, token)) attempted++;
    const left = due.slice(next).map((d) => d.id);
    if (left.length > 0) {
      await this.o.db.query(
        'UPDATE admin_webhook_deliveries SET lease_token = NULL, next_attempt_at = $3 WHERE id = ANY($1::uuid[]) AND lease_token = $2',
        [left, token, now],
      );
    }
    return attempted;
  }

  /**
   * Renew the lease for this attempt and read what to send, in one statement. No row: the lease
   * was lost (it ran out and another dispatcher claimed the delivery, or the endpoint was
   * deleted), so this dispatcher does not send. `webhook-id` is the outbox id: the same on
   * every redelivery, so receivers deduplicate by it (at-least-once).
   */
  private async attempt(d: Claimed, token: string): Promise<boolean> {
    const { rows } = await this.o.db.query<
      WebhookRow & { event: string; payload: unknown; created_at_event: Date }
    >(
      `WITH lease AS (
         UPDATE admin_webhook_deliveries SET next_attempt_at = $3 WHERE id = $1 AND lease_token = $2 AND status = 'PENDING' RETURNING webhook_id, outbox_id)
       SELECT w.*, o.event, o.payload, o.created_at AS created_at_event FROM lease, admin_webhooks w, outbox o WHERE w.id = lease.webhook_id AND o.id = lease.outbox_id`,
      [d.id, token, this.leaseEnd()],
    );
    const w = rows[0];
    if (!w) return false;
    const body = JSON.stringify({
      type: w.event,
      timestamp: w.created_at_event.toISOString(),
      data: w.payload,
    });
    const r = await send(
      this.guard,
      w.url,
      secretsOf(this.o.keys, w, this.o.now()),
      `msg_${d.outbox_id}`,
      this.o.now(),
      body,
      this.o.timeoutMs,
    );
    // Counted once the transaction committed (a retried transaction would count twice inside).
    if ((await this.o.db.tx((q) => this.record(q, d, token, r))) === 'DEAD') this.o.deadLettered?.inc();
    return true;
  }

  /**
   * Record an attempt under the lease token (a dispatcher whose lease was taken over records
   * nothing; the new holder delivers again). The outbox row is locked first, so two dispatchers
   * recording deliveries of one message to two endpoints see each other's result when they
   * derive the message's status.
   */
  private async record(
    q: Queryable,
    d: Claimed,
    token: string,
    r: Attempt,
  ): Promise<'DELIVERED' | 'DEAD' | 'PENDING' | undefined> {
    const attempts = d.attempts + 1;
    const now = this.o.now();
    const status = r.ok ? 'DELIVERED' : attempts >= this.o.maxAttempts ? 'DEAD' : 'PENDING';
    const next = new Date(
      now +
        (status === 'PENDING'
          ? backoffMs(attempts, this.o.baseDelayMs, this.o.maxDelayMs, this.o.random)
          : 0),
    );
    await q.query('SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE', [d.outbox_id]);
    const { rowCount } = await q.query(
      `UPDATE admin_webhook_deliveries SET status = $2::text, attempts = $3, next_attempt_at = $4, last_status = $5, last_error = $6, delivered_at = CASE WHEN $2::text = 'DELIVERED' THEN $7::timestamptz ELSE NULL END, lease_token = NULL
        WHERE id = $1 AND lease_token = $8 AND status = 'PENDING'`,
      [d.id, status, attempts, next, r.status, r.error, new Date(now), token],
    );
    if (rowCount === 0) {
      this.o.log.warn(
        { delivery: d.id },
        'webhook delivery lease lost during the attempt; the result is not recorded',
      );
      return undefined;
    }
    await q.query(
      // A message delivered everywhere no longer shows the error of an earlier failed attempt
      // (issue 15 item 8); while any delivery is pending or dead, the latest error stays.
      `UPDATE outbox o SET attempts = greatest(o.attempts, $2), status = s.status,
          last_error = CASE WHEN s.status = 'DELIVERED' THEN NULL ELSE coalesce($3::text, o.last_error) END,
          processed_at = CASE WHEN NOT EXISTS (SELECT 1 FROM admin_webhook_deliveries x WHERE x.outbox_id = o.id AND x.status = 'PENDING') THEN $4::timestamptz ELSE NULL END,
          next_attempt_at = $5
        FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM admin_webhook_deliveries x WHERE x.outbox_id = $1 AND x.status = 'DEAD') THEN 'DEAD'
                          WHEN NOT EXISTS (SELECT 1 FROM admin_webhook_deliveries x WHERE x.outbox_id = $1 AND x.status <> 'DELIVERED') THEN 'DELIVERED'
                          ELSE 'PENDING' END AS status) s
        WHERE o.id = $1`,
      [d.outbox_id, attempts, r.error, new Date(now), next],
    );
    return status;
  }
}
