/**
 * Decision audit off the hot path (issue: every decision, allow and deny, is audited): entries
 * queue in memory and are written in batches in one transaction. Nothing is dropped: a failed
 * batch is retried, and while the queue is past `maxQueued` the edge refuses to decide
 * (`overloaded()`), so an allow is never given that could not be recorded.
 */
import type { Logger } from 'pino';
import { appendAudit, type AuditEntry } from '../core/audit/audit.ts';
import type { Db } from '../core/db/pool.ts';

export const auditFlushMs = 200;
export const auditBatchMax = 500;
export const maxQueued = 20_000;

export class AuditWriter {
  private queue: AuditEntry[] = [];
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly db: Db, private readonly log: Logger, private readonly bound = maxQueued) {}

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
    while (this.queue.length > 0) {
      const batch = this.queue.slice(0, auditBatchMax);
      try {
        await this.db.tx((client) => appendAudit(client, batch));
        this.queue.splice(0, batch.length);
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
