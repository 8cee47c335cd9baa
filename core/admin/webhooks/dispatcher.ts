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
 */
import { request } from 'undici';
import type { Logger } from 'pino';
import type { Db, Queryable } from '../../db/pool.ts';
import type { KeyStore } from '../../keys/keys.ts';
import { signedHeaders } from './sign.ts';
import { secretsOf, type WebhookRow } from './store.ts';
import { TargetGuard } from './target.ts';

export interface DispatcherOptions {
  db: Db; keys: KeyStore; log: Logger; now?: () => number; random?: () => number;
  pollMs?: number; batchSize?: number; maxAttempts?: number; baseDelayMs?: number; maxDelayMs?: number; timeoutMs?: number;
  /** Tests and the development stack only: deliver to loopback/private/link-local/CGNAT targets. Off by default. */
  allowPrivateTargets?: boolean;
  /** A guard of one's own (tests inject name resolution); overrides allowPrivateTargets. */
  targets?: TargetGuard;
}

export const defaultMaxAttempts = 8;

/** Delay before attempt n+1 after n failures: full jitter over min(max, base × 2^(n−1)), at least base/2. */
export function backoffMs(failures: number, baseMs: number, maxMs: number, random: () => number): number {
  const cap = Math.min(maxMs, baseMs * 2 ** Math.max(0, failures - 1));
  return Math.max(baseMs / 2, Math.floor(cap * random()));
}

export interface Attempt { ok: boolean; status: number | null; error: string | null; ms: number }

/** One signed POST through the SSRF guard (no redirects followed); never throws. */
export async function send(guard: TargetGuard, url: string, secrets: string[], id: string, nowMs: number, body: string, timeoutMs: number): Promise<Attempt> {
  const started = Date.now();
  try {
    const refused = guard.deliveryRefusal(new URL(url));
    if (refused) return { ok: false, status: null, error: refused, ms: Date.now() - started };
    const res = await request(url, {
      method: 'POST', headers: signedHeaders(secrets, id, Math.floor(nowMs / 1000), body), body, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, dispatcher: guard.dispatcher(),
    });
    await res.body.text().catch(() => '');
    const ok = res.statusCode >= 200 && res.statusCode < 300;
    return { ok, status: res.statusCode, error: ok ? null : `HTTP ${res.statusCode}`, ms: Date.now() - started };
  } catch (err) {
    return { ok: false, status: null, error: (err as Error).message.slice(0, 200), ms: Date.now() - started };
  }
}

export class Dispatcher {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly o: Required<Omit<DispatcherOptions, 'db' | 'keys' | 'log' | 'targets'>> & Pick<DispatcherOptions, 'db' | 'keys' | 'log'>;
  private readonly guard: TargetGuard;

  constructor(opts: DispatcherOptions) {
    this.o = { now: Date.now, random: Math.random, pollMs: 500, batchSize: 50, maxAttempts: defaultMaxAttempts, baseDelayMs: 1000, maxDelayMs: 3_600_000, timeoutMs: 5000, allowPrivateTargets: false, ...opts };
    this.guard = opts.targets ?? new TargetGuard({ allowPrivateTargets: this.o.allowPrivateTargets });
  }

  start(): void {
    this.stopped = false;
    const loop = () => {
      if (this.stopped) return;
      this.running = this.tick().catch((err: unknown) => this.o.log.warn({ err: (err as Error).message }, 'webhook dispatch failed')).then(() => {
        if (!this.stopped) this.timer = setTimeout(loop, this.o.pollMs);
      });
    };
    loop();
  }

  /** Stop polling and wait for the batch in flight. */
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

  private async route(): Promise<void> {
    await this.o.db.tx(async (q) => {
      const { rows } = await q.query<{ id: string; tenant_id: string; aggregate: string; aggregate_id: string; event: string }>(
        `SELECT id, tenant_id, aggregate, aggregate_id, event FROM outbox
          WHERE routed_at IS NULL AND status = 'PENDING' AND NOT (headers ? 'content-class' AND headers->>'content-class' = 'secret')
          ORDER BY created_at, id LIMIT $1 FOR UPDATE SKIP LOCKED`, [this.o.batchSize]);
      const now = new Date(this.o.now());
      for (const e of rows) {
        const { rowCount } = await q.query(
          `INSERT INTO admin_webhook_deliveries (id, tenant_id, webhook_id, outbox_id, aggregate_key, next_attempt_at)
           SELECT gen_random_uuid(), w.tenant_id, w.id, $1, $2, $3 FROM admin_webhooks w
            WHERE w.tenant_id = $4 AND w.status <> 'DELETED' AND ($5 = ANY(w.events) OR '*' = ANY(w.events))
            ORDER BY w.id ON CONFLICT DO NOTHING`,
          [e.id, `${e.aggregate}:${e.aggregate_id}`, now, e.tenant_id, e.event]);
        await q.query(`UPDATE outbox SET routed_at = $2::timestamptz, status = CASE WHEN $3::boolean THEN 'PENDING' ELSE 'DELIVERED' END, processed_at = CASE WHEN $3::boolean THEN NULL ELSE $2::timestamptz END WHERE id = $1`,
          [e.id, now, (rowCount ?? 0) > 0]);
      }
    });
  }

  private async deliver(): Promise<number> {
    const now = new Date(this.o.now());
    const leaseUntil = new Date(this.o.now() + this.o.timeoutMs * 2);
    const due = await this.o.db.tx(async (q) => {
      const { rows } = await q.query<{ id: string; outbox_id: string; attempts: number; webhook_id: string }>(
        `SELECT d.id, d.outbox_id, d.attempts, d.webhook_id FROM admin_webhook_deliveries d JOIN admin_webhooks w ON w.id = d.webhook_id
          WHERE d.status = 'PENDING' AND d.next_attempt_at <= $1 AND w.status = 'ACTIVE'
            AND NOT EXISTS (SELECT 1 FROM admin_webhook_deliveries e WHERE e.webhook_id = d.webhook_id AND e.aggregate_key = d.aggregate_key AND e.status = 'PENDING' AND e.seq < d.seq)
          ORDER BY d.seq LIMIT $2 FOR UPDATE OF d SKIP LOCKED`, [now, this.o.batchSize]);
      if (rows.length > 0) await q.query('UPDATE admin_webhook_deliveries SET next_attempt_at = $2 WHERE id = ANY($1::uuid[])', [rows.map((r) => r.id), leaseUntil]);
      return rows;
    });
    for (const d of due) await this.attempt(d);
    return due.length;
  }

  private async attempt(d: { id: string; outbox_id: string; attempts: number; webhook_id: string }): Promise<void> {
    const { rows } = await this.o.db.query<WebhookRow & { event: string; payload: unknown; created_at_event: Date }>(
      `SELECT w.*, o.event, o.payload, o.created_at AS created_at_event FROM admin_webhooks w, outbox o WHERE w.id = $1 AND o.id = $2`, [d.webhook_id, d.outbox_id]);
    const w = rows[0];
    if (!w) return;
    const body = JSON.stringify({ type: w.event, timestamp: w.created_at_event.toISOString(), data: w.payload });
    const r = await send(this.guard, w.url, secretsOf(this.o.keys, w, this.o.now()), `msg_${d.outbox_id}`, this.o.now(), body, this.o.timeoutMs);
    await this.o.db.tx((q) => this.record(q, d, r));
  }

  private async record(q: Queryable, d: { id: string; outbox_id: string; attempts: number }, r: Attempt): Promise<void> {
    const attempts = d.attempts + 1;
    const now = this.o.now();
    const status = r.ok ? 'DELIVERED' : attempts >= this.o.maxAttempts ? 'DEAD' : 'PENDING';
    const next = new Date(now + (status === 'PENDING' ? backoffMs(attempts, this.o.baseDelayMs, this.o.maxDelayMs, this.o.random) : 0));
    await q.query(
      `UPDATE admin_webhook_deliveries SET status = $2::text, attempts = $3, next_attempt_at = $4, last_status = $5, last_error = $6, delivered_at = CASE WHEN $2::text = 'DELIVERED' THEN $7::timestamptz ELSE NULL END WHERE id = $1`,
      [d.id, status, attempts, next, r.status, r.error, new Date(now)]);
    await q.query(
      `UPDATE outbox o SET attempts = greatest(o.attempts, $2), last_error = coalesce($3::text, o.last_error),
          status = CASE WHEN EXISTS (SELECT 1 FROM admin_webhook_deliveries x WHERE x.outbox_id = o.id AND x.status = 'DEAD') THEN 'DEAD'
                        WHEN NOT EXISTS (SELECT 1 FROM admin_webhook_deliveries x WHERE x.outbox_id = o.id AND x.status <> 'DELIVERED') THEN 'DELIVERED' ELSE 'PENDING' END,
          processed_at = CASE WHEN NOT EXISTS (SELECT 1 FROM admin_webhook_deliveries x WHERE x.outbox_id = o.id AND x.status = 'PENDING') THEN $4::timestamptz ELSE NULL END,
          next_attempt_at = $5
        WHERE id = $1`,
      [d.outbox_id, attempts, r.error, new Date(now), next]);
  }
}
