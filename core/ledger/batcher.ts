/**
 * The ledger's write path. Commands queue here and run in batches: one transaction claims
 * the batch's idempotency keys, applies every command with one call to `ledger_apply` (lock
 * phase in global account order, then each command in arrival order), stores each response
 * under its key and appends the audit records, then commits once. A batch closes when it is
 * full or at the end of a short window (by default the current turn of the event loop), and
 * forms while earlier ones are in flight, so latency is one transaction when idle and fsyncs
 * are shared under load. Serialization failures and deadlocks are retried by `Db.tx`, invisibly.
 */
import type { Logger } from 'pino';
import type { Db, Queryable } from '../db/pool.ts';
import { appendAudit, type AuditEntry } from '../audit/audit.ts';
import { AppError, isErrorCode, toCoreBody } from '../http/errors.ts';
import { claimKeys, completeKeys, findKey, replay, type IdemScope, type StoredResponse } from '../idempotency/idempotency.ts';

/** Most commands in one transaction: bounds lock sets and the statement's size. */
export const maxBatchCommands = 256;
/** Queue bound: past it, writes are refused with 503 rather than waiting without end. */
export const maxQueuedCommands = 20_000;
/**
 * Transactions in flight at once. Two let the next batch claim its keys, lock and apply while
 * the previous one writes its audit records and waits for its commit's fsync (batches of one
 * tenant still serialise on the audit chain head, and on a hot account's balance row).
 */
export const defaultInFlightBatches = 2;
/**
 * A batch closes when it is full (`maxBatchCommands`) or when this window has passed since
 * its first command was queued; 0 closes it at the next turn of the event loop, which already
 * gathers every command submitted in the same turn (e.g. all the clients a batch just
 * answered). Commands never wait for a slot longer than it takes one to free.
 */
export const defaultBatchWindowMs = 0;

export type LedgerCommand = { op: 'post' | 'reverse' | 'hold' | 'capture' | 'void' | 'expire'; tenant: string } & Record<string, unknown>;

/** What `ledger_apply` answers for one command. */
export type ApplyResult = ({ ok: true } & Record<string, unknown>) | { ok: false; code: string; message: string };

export interface Job {
  cmd: LedgerCommand;
  scope?: IdemScope;
  audit?: Omit<AuditEntry, 'attrs'> & { attrs: Record<string, unknown> };
  /** The success response (status and JSON text) for this command's result. */
  render(result: ApplyResult & { ok: true }): { status: number; body: string };
}

interface Queued extends Job {
  resolve(r: StoredResponse): void;
  reject(err: unknown): void;
}

/** Retries of a batch whose connection died (terminated backend, network). */
export const connectionRetryLimit = 2;

/** Admin shutdown / crash (57P01–57P03), connection exceptions (08xxx), socket errors. */
export function isConnectionLoss(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string') return err instanceof Error && /Connection terminated|ECONNRESET|EPIPE/.test(err.message);
  return code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === 'ECONNRESET' || code === 'EPIPE';
}

type Outcome = { kind: 'done'; status: number; body: string } | { kind: 'duplicate' };

function isApplyResult(v: unknown): v is ApplyResult {
  return typeof v === 'object' && v !== null && typeof (v as { ok?: unknown }).ok === 'boolean';
}

/** A failed result as the response the client sees (and a replay repeats). */
export function failureResponse(code: string, message: string): { status: number; body: string } {
  const err = new AppError(isErrorCode(code) ? code : 'INTERNAL', isErrorCode(code) ? message : 'internal error');
  return { status: err.status, body: JSON.stringify(toCoreBody(err)) };
}

export class LedgerBatcher {
  private readonly queue: Queued[] = [];
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly windowMs: number;
  private scheduled: NodeJS.Immediate | NodeJS.Timeout | undefined;
  /** Batches started and commands in them (the bench prints the mean batch size). */
  readonly stats = { batches: 0, commands: 0 };

  constructor(private readonly db: Db, private readonly log: Logger, opts: { inFlightBatches?: number; batchWindowMs?: number } = {}) {
    this.maxInFlight = opts.inFlightBatches ?? defaultInFlightBatches;
    this.windowMs = opts.batchWindowMs ?? defaultBatchWindowMs;
  }

  /** Run one command; resolves with its stored response (first run or replay). */
  submit(job: Job): Promise<StoredResponse> {
    if (this.queue.length >= maxQueuedCommands) {
      return Promise.reject(new AppError('SERVICE_UNAVAILABLE', 'ledger is overloaded; retry later', { headers: { 'retry-after': '1' } }));
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ ...job, resolve, reject });
      this.schedule();
    });
  }

  /** Close a batch now when one is full, else after the window (or the current turn). */
  private schedule(): void {
    if (this.inFlight >= this.maxInFlight || this.queue.length === 0) return;
    if (this.queue.length >= maxBatchCommands) {
      this.cancel();
      this.pump();
      return;
    }
    if (this.scheduled) return;
    this.scheduled = this.windowMs > 0
      ? setTimeout(() => { this.scheduled = undefined; this.pump(); }, this.windowMs)
      : setImmediate(() => { this.scheduled = undefined; this.pump(); });
  }

  private cancel(): void {
    if (!this.scheduled) return;
    clearTimeout(this.scheduled as NodeJS.Timeout);
    clearImmediate(this.scheduled as NodeJS.Immediate);
    this.scheduled = undefined;
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, maxBatchCommands);
      this.inFlight++;
      this.stats.batches++;
      this.stats.commands += batch.length;
      void this.runBatch(batch).finally(() => {
        this.inFlight--;
        this.schedule();
      });
    }
  }

  private async runBatch(batch: Queued[], attempt = 0): Promise<void> {
    let outcomes: Outcome[];
    try {
      outcomes = await this.db.tx((client) => this.execute(client, batch));
    } catch (err) {
      if (isConnectionLoss(err) && attempt < connectionRetryLimit) {
        // Safe even if the COMMIT landed before the connection died: every keyed command
        // then finds its key taken and answers with the stored response (exactly once).
        this.log.warn({ err: (err as Error).message }, 'ledger batch lost its connection; retrying');
        return this.runBatch(batch, attempt + 1);
      }
      if (batch.length > 1) {
        // One command broke the whole transaction (a bug or a guard): isolate it.
        this.log.warn({ err: (err as Error).message, size: batch.length }, 'ledger batch failed; retrying one by one');
        for (const job of batch) await this.runBatch([job]);
        return;
      }
      for (const job of batch) job.reject(err);
      return;
    }
    await Promise.all(batch.map(async (job, i) => {
      const o = outcomes[i];
      try {
        if (!o) throw new AppError('INTERNAL', 'ledger batch lost a command');
        if (o.kind === 'done') return job.resolve({ status: o.status, body: o.body, replayed: false });
        // The key was taken by an earlier or concurrent request: answer with its response.
        const scope = job.scope;
        const row = scope ? await findKey(this.db, scope.tenantId, scope.key) : undefined;
        if (!scope || !row) throw new AppError('SERVICE_UNAVAILABLE', 'idempotency key is busy; retry');
        job.resolve(replay(row, scope));
      } catch (err) {
        job.reject(err);
      }
    }));
  }

  private async execute(client: Queryable, batch: Queued[]): Promise<Outcome[]> {
    const keyed = batch.flatMap((j, i) => (j.scope ? [{ i, scope: j.scope }] : []));
    const claimed = await claimKeys(client, keyed.map((k) => k.scope));
    const lost = new Set(keyed.filter((_, n) => !claimed[n]).map((k) => k.i));
    const run = batch.map((j, i) => ({ j, i })).filter(({ i }) => !lost.has(i));
    const outcomes: Outcome[] = batch.map(() => ({ kind: 'duplicate' }));
    if (run.length === 0) return outcomes;
    const { rows } = await client.query<{ r: unknown }>('SELECT ledger_apply($1::jsonb) AS r', [JSON.stringify(run.map(({ j }) => j.cmd))]);
    const results = rows[0]?.r;
    if (!Array.isArray(results) || results.length !== run.length) throw new Error('ledger_apply answered an unexpected shape');
    const done: { scope: IdemScope; status: number; body: string }[] = [];
    const audits: AuditEntry[] = [];
    run.forEach(({ j, i }, n) => {
      const result: unknown = results[n];
      if (!isApplyResult(result)) throw new Error('ledger_apply answered an unexpected result');
      const res = result.ok ? j.render(result) : failureResponse(result.code, result.message);
      outcomes[i] = { kind: 'done', ...res };
      if (j.scope) done.push({ scope: j.scope, ...res });
      if (j.audit) audits.push({ ...j.audit, attrs: { ...j.audit.attrs, outcome: result.ok ? 'ok' : result.code } });
    });
    await completeKeys(client, done);
    if (audits.length > 0) await appendAudit(client, audits);
    return outcomes;
  }
}
