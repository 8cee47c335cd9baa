/**
 * The ledger's write path. Commands queue here and run in batches: one transaction claims
 * the batch's idempotency keys and applies the claimed commands with one call to
 * `ledger_apply_keyed` → `ledger_apply` (lock phase in global account order, then the
 * commands in arrival order, set-based for a batch of postings) and locks the chain heads of its
 * audit records in a first round trip; appends the audit records, stores each response under its
 * key and commits in a second (issue 18 item 2: four round trips before). A batch closes when it is
 * full or at the end of a short window (by default the current turn of the event loop), and
 * forms while earlier ones are in flight, so latency is one transaction when idle and fsyncs
 * are shared under load. Serialization failures and deadlocks are retried by `Db.tx`, invisibly.
 */
import type { Logger } from 'pino';
import pg from 'pg';
import { txRetryLimit, type Db } from '../../shared/db/pool.ts';
import { sqlLiteral } from '../../shared/db/literal.ts';
import {
  auditHeadsLock,
  auditRowsWrite,
  withoutRequestAudit,
  withRequestFacts,
  type AuditEntry,
} from '../../shared/audit.ts';
import { AppError, toCoreBody } from '../../shared/errors.ts';
import { findKey, replay, type IdemScope, type StoredResponse } from '../idempotency/idempotency.ts';
import { storedForm, type ResponseVault } from '../idempotency/secrets.ts';
import { refusalError } from './apply.ts';

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

/** A batch transaction's round trips, in order (what `BatchStepTimer` sees). */
export type BatchStep = 'claim+apply' | 'audit+responses+commit';
/**
 * Wraps each round trip of a batch's transaction (issue 18 item 2: where a batch's time goes,
 * measured on the real path by `bench/ledger/profile.ts`); `backendPid` is the PostgreSQL
 * backend running it. Without one, the steps run as they are.
 */
export type BatchStepTimer = <T>(step: BatchStep, backendPid: number, run: () => Promise<T>) => Promise<T>;

export type LedgerCommand = {
  op: 'post' | 'reverse' | 'hold' | 'capture' | 'void' | 'expire';
  tenant: string;
} & Record<string, unknown>;

/** What `ledger_apply` answers for one command. */
export type ApplyResult =
  | ({ ok: true } & Record<string, unknown>)
  | { ok: false; code: string; message: string };

export interface Job {
  cmd: LedgerCommand;
  scope?: IdemScope;
  audit?: Omit<AuditEntry, 'attrs'> & { attrs: Record<string, unknown> };
  /**
   * Records whose targets only the result names, in the command's tenant (the expiry sweep: one
   * per hold it expired). Appended with the batch's other records, in its transaction and its one
   * insert; written outside any request (the sweeper has none), so they carry no request facts.
   */
  auditsOf?(result: ApplyResult): Omit<AuditEntry, 'tenantId'>[];
  /** The success response (status and JSON text) for this command's result. */
  render(result: ApplyResult & { ok: true }): { status: number; body: string };
}

interface Queued extends Job {
  resolve(r: StoredResponse): void;
  reject(err: unknown): void;
}

/** A job's audit record with the current request's decision and request facts. */
function stamped(a: NonNullable<Job['audit']>): NonNullable<Job['audit']> {
  const e = withRequestFacts(a);
  return { ...e, attrs: e.attrs ?? {} };
}

/** Retries of a batch whose connection died (terminated backend, network). */
export const connectionRetryLimit = 2;

/** Admin shutdown / crash (57P01–57P03), connection exceptions (08xxx), socket errors. */
export function isConnectionLoss(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string')
    return err instanceof Error && /Connection terminated|ECONNRESET|EPIPE/.test(err.message);
  return (
    code.startsWith('08') ||
    code === '57P01' ||
    code === '57P02' ||
    code === '57P03' ||
    code === 'ECONNRESET' ||
    code === 'EPIPE'
  );
}

type Outcome = { kind: 'done'; status: number; body: string } | { kind: 'duplicate' };

function isApplyResult(v: unknown): v is ApplyResult {
  return typeof v === 'object' && v !== null && typeof (v as { ok?: unknown }).ok === 'boolean';
}

/** A failed result as the response the client sees (and a replay repeats). */
export function failureResponse(code: string, message: string): { status: number; body: string } {
  const err = refusalError(code, message);
  return { status: err.status, body: JSON.stringify(toCoreBody(err)) };
}

export class LedgerBatcher {
  private readonly queue: Queued[] = [];
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly windowMs: number;
  private readonly maxBatch: number;
  private readonly timer: BatchStepTimer | undefined;
  private scheduled: NodeJS.Immediate | NodeJS.Timeout | undefined;
  /** Batches started and commands in them (the bench prints the mean batch size). */
  readonly stats = { batches: 0, commands: 0 };

  private readonly vault: ResponseVault | undefined;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    opts: {
      inFlightBatches?: number;
      batchWindowMs?: number;
      maxBatchCommands?: number;
      vault?: ResponseVault | undefined;
      stepTimer?: BatchStepTimer | undefined;
    } = {},
  ) {
    this.vault = opts.vault;
    this.timer = opts.stepTimer;
    this.maxInFlight = opts.inFlightBatches ?? defaultInFlightBatches;
    this.windowMs = opts.batchWindowMs ?? defaultBatchWindowMs;
    this.maxBatch = Math.max(1, Math.min(maxBatchCommands, opts.maxBatchCommands ?? maxBatchCommands));
  }

  /** Run one command; resolves with its stored response (first run or replay). */
  submit(job: Job): Promise<StoredResponse> {
    if (this.queue.length >= maxQueuedCommands) {
      return Promise.reject(
        new AppError('SERVICE_UNAVAILABLE', 'ledger is overloaded; retry later', {
          headers: { 'retry-after': '1' },
        }),
      );
    }
    // Issue 20 item 5: the submitting request's decision is taken now; the batch appends its
    // records outside any one request's facts (runBatch), so each keeps its own.
    const audit = job.audit ? stamped(job.audit) : undefined;
    return new Promise((resolve, reject) => {
      this.queue.push({ ...job, ...(audit ? { audit } : {}), resolve, reject });
      this.schedule();
    });
  }

  /** Close a batch now when one is full, else after the window (or the current turn). */
  private schedule(): void {
    if (this.inFlight >= this.maxInFlight || this.queue.length === 0) return;
    if (this.queue.length >= this.maxBatch) {
      this.cancel();
      this.pump();
      return;
    }
    if (this.scheduled) return;
    this.scheduled =
      this.windowMs > 0
        ? setTimeout(() => {
            this.scheduled = undefined;
            this.pump();
          }, this.windowMs)
        : setImmediate(() => {
            this.scheduled = undefined;
            this.pump();
          });
  }

  private cancel(): void {
    if (!this.scheduled) return;
    clearTimeout(this.scheduled as NodeJS.Timeout);
    clearImmediate(this.scheduled as NodeJS.Immediate);
    this.scheduled = undefined;
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
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
      outcomes = await this.transaction(batch);
    } catch (err) {
      if (isConnectionLoss(err) && attempt < connectionRetryLimit) {
        // Safe even if the COMMIT landed before the connection died: every keyed command
        // then finds its key taken and answers with the stored response (exactly once).
        this.log.warn({ err: (err as Error).message }, 'ledger batch lost its connection; retrying');
        return this.runBatch(batch, attempt + 1);
      }
      if (batch.length > 1) {
        // One command broke the whole transaction (a bug or a guard): isolate it.
        this.log.warn(
          { err: (err as Error).message, size: batch.length },
          'ledger batch failed; retrying one by one',
        );
        for (const job of batch) await this.runBatch([job]);
        return;
      }
      for (const job of batch) job.reject(err);
      return;
    }
    await Promise.all(
      batch.map(async (job, i) => {
        const o = outcomes[i];
        try {
          if (!o) throw new AppError('INTERNAL', 'ledger batch lost a command');
          if (o.kind === 'done') return job.resolve({ status: o.status, body: o.body, replayed: false });
          // The key was taken by an earlier or concurrent request: answer with its response.
          const scope = job.scope;
          const row = scope ? await findKey(this.db, scope) : undefined;
          if (!scope || !row) throw new AppError('SERVICE_UNAVAILABLE', 'idempotency key is busy; retry');
          job.resolve(replay(row, scope, this.vault));
        } catch (err) {
          job.reject(err);
        }
      }),
    );
  }

  /**
   * One transaction for the batch in two round trips:
   * `BEGIN; SELECT ledger_apply_keyed(keys, commands); <lock the audit chain heads>` (claim the
   * keys, apply the claimed commands, lock and read the heads, in the order every writer takes
   * them), then `<audit rows>; SELECT idempotency_complete(...); COMMIT` (migration 0920). Arguments travel as escaped literals: a string of several statements
   * is sent with the simple query protocol, which takes no parameters. Serialization failures
   * and deadlocks are retried like `Db.tx` does, a bounded number of times.
   */
  private async transaction(batch: Queued[]): Promise<Outcome[]> {
    for (let attempt = 0; ; attempt++) {
      const client = await this.db.pool.connect();
      // A backend killed mid-transaction makes the checked-out client emit 'error'.
      const onLost = (e: Error) => this.log.warn({ err: e.message }, 'ledger batch connection lost');
      client.on('error', onLost);
      try {
        const outcomes = await this.execute(client, batch);
        client.off('error', onLost);
        client.release();
        return outcomes;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        const code = (err as { code?: unknown }).code;
        const lost = typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08'));
        client.off('error', onLost);
        client.release(typeof code === 'string' && code.length === 5 && !lost ? undefined : (err as Error));
        if ((code === '40001' || code === '40P01') && attempt < txRetryLimit) {
          await new Promise((r) => setTimeout(r, Math.random() * 5 * (attempt + 1)));
          continue;
        }
        throw err;
      }
    }
  }

  private step<T>(step: BatchStep, client: pg.PoolClient, run: () => Promise<T>): Promise<T> {
    return this.timer ? this.timer(step, (client as unknown as { processID: number }).processID, run) : run();
  }

  private async execute(client: pg.PoolClient, batch: Queued[]): Promise<Outcome[]> {
    const keys = batch.map((j) =>
      j.scope
        ? {
            tenant: j.scope.tenantId,
            key: j.scope.key,
            principal: j.scope.principal,
            method: j.scope.method,
            path: j.scope.path,
            hash: j.scope.requestHash,
          }
        : null,
    );
    // The chain heads of the batch's audit records are locked in the same round trip, after the
    // keys and balance rows (the order every writer takes them in), and read for the hashes.
    const auditTenants = batch.flatMap((j) => [
      ...(j.audit ? [j.audit.tenantId] : []),
      ...(j.auditsOf ? [j.cmd.tenant] : []),
    ]);
    const headLock = auditTenants.length > 0 ? `; ${auditHeadsLock(auditTenants)}` : '';
    const first = (await this.step('claim+apply', client, () =>
      client.query(
        `BEGIN; SELECT ledger_apply_keyed(${sqlLiteral(JSON.stringify(keys))}::jsonb, ${sqlLiteral(JSON.stringify(batch.map((j) => j.cmd)))}::jsonb) AS r${headLock}`,
      ),
    )) as unknown as pg.QueryResult<Record<string, unknown>>[];
    const results = first[1]?.rows[0]?.r;
    const heads = (first[2]?.rows ?? []) as { tenant_id: string; last_hash: Buffer }[];
    if (!Array.isArray(results) || results.length !== batch.length)
      throw new Error('ledger_apply_keyed answered an unexpected shape');
    const outcomes: Outcome[] = batch.map(() => ({ kind: 'duplicate' }));
    const done: {
      tenant: string;
      key: string;
      principal: string;
      status: number;
      body: string;
      sealed: string | null;
    }[] = [];
    const audits: AuditEntry[] = [];
    batch.forEach((j, i) => {
      const result: unknown = results[i];
      if (result === null) return; // the key was taken: replayed after the commit
      if (!isApplyResult(result)) throw new Error('ledger_apply answered an unexpected result');
      const res = result.ok ? j.render(result) : failureResponse(result.code, result.message);
      outcomes[i] = { kind: 'done', ...res };
      if (j.scope) {
        const form = storedForm(this.vault, j.scope, res.body);
        done.push({
          tenant: j.scope.tenantId,
          key: j.scope.key,
          principal: j.scope.principal,
          status: res.status,
          body: form.body,
          sealed: form.sealed?.toString('base64') ?? null,
        });
      }
      if (j.audit)
        audits.push({ ...j.audit, attrs: { ...j.audit.attrs, outcome: result.ok ? 'ok' : result.code } });
      for (const e of j.auditsOf?.(result) ?? []) audits.push({ ...e, tenantId: j.cmd.tenant });
    });
    // The audit records, the responses (one primary-key probe each, migration 0920) and the
    // commit in the second and last round trip.
    const rows = audits.length > 0 ? `${withoutRequestAudit(() => auditRowsWrite(audits, heads))}; ` : '';
    const complete =
      done.length === 0 ? '' : `SELECT idempotency_complete(${sqlLiteral(JSON.stringify(done))}::jsonb); `;
    await this.step('audit+responses+commit', client, () => client.query(`${rows}${complete}COMMIT`));
    return outcomes;
  }
}
