/**
 * Decision audit off the hot path (issue: every decision, allow and deny, is audited): entries
 * queue in memory and are written in batches in one transaction. Nothing is dropped: a failed
 * batch is retried, and while the queue is past `maxQueued` the edge refuses to decide
 * (`overloaded()`), so an allow is never given that could not be recorded.
 */
import type { Logger } from 'pino';
import { appendAudit, type AuditEntry } from '../core/audit/audit.ts';
import type { Db } from '../core/db/pool.ts';

/**
 * Small batches, often: hashing and serialising a batch runs on the thread that answers Checks
 * (about 20 µs an entry), so a batch of 500 every 200 ms put a 10 ms stall into every fifth of
 * a second; at 1,000 decisions/s a batch is now about 50 entries (about 1 ms).
 */
export const auditFlushMs = 50;
export const auditBatchMax = 128;
export const maxQueued = 20_000;
/** Room past the bound for fail-closed denials, which keep coming while decisions are refused. */
export const failClosedReserve = 10_000;

export class AuditWriter {
  private queue: AuditEntry[] = [];
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Fail-closed denials past the reserve: counted, then recorded as one entry once writes resume. */
  private unrecorded: { count: number; from: Date; to: Date; sample: AuditEntry } | undefined;

  constructor(private readonly db: Db, private readonly log: Logger, private readonly bound = maxQueued, private readonly reserve = failClosedReserve) {}

  start(): void {
    this.timer = setInterval(() => void this.flush(), auditFlushMs);
    this.timer.unref();
  }

  /** True when decisions must stop: the writer is too far behind. */
  overloaded(): boolean {
    return this.queue.length >= this.bound;
  }

  push(entry: AuditEntry): void {
    this.queue.push(entry);
    if (this.queue.length >= auditBatchMax) void this.flush();
  }

  /**
   * A fail-closed denial. It is queued even past the bound (decisions have stopped, so these are
   * all that arrive) up to `failClosedReserve` more; beyond that they are counted and written as
   * one `authz.unrecorded` entry (count, first and last time, one example) when the queue drains.
   */
  pushFailClosed(entry: AuditEntry): void {
    if (this.queue.length < this.bound + this.reserve) {
      this.push(entry);
      return;
    }
    const now = new Date();
    if (this.unrecorded) {
      this.unrecorded.count += 1;
      this.unrecorded.to = now;
    } else {
      this.unrecorded = { count: 1, from: now, to: now, sample: entry };
    }
  }

  pending(): number {
    return this.queue.length;
  }

  /** Write everything queued so far (serialised: one batch at a time, in order). */
  flush(): Promise<void> {
    this.flushing ??= this.drain().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async drain(): Promise<void> {
    if (this.unrecorded && this.queue.length < this.bound) {
      const u = this.unrecorded;
      this.unrecorded = undefined;
      this.queue.push({
        ...u.sample, action: 'authz.unrecorded', ts: u.to,
        attrs: { ...u.sample.attrs, count: u.count, from: u.from.toISOString(), to: u.to.toISOString() },
      });
    }
    while (this.queue.length > 0) {
      const batch = this.queue.slice(0, auditBatchMax);
      try {
        await this.db.tx((client) => appendAudit(client, batch));
        this.queue.splice(0, batch.length);
        // Let waiting Checks run between batches of a backlog.
        if (this.queue.length > 0) await new Promise<void>((r) => setImmediate(r));
      } catch (err) {
        this.log.warn({ err: (err as Error).message, pending: this.queue.length }, 'decision audit write failed; will retry');
        return;
      }
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
  }
}
