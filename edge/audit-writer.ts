/**
 * Decision audit off the hot path (issue: every decision, allow and deny, is audited): entries
 * queue in memory and are written in batches, one transaction each, by a sink: on this thread
 * (inlineSink) or on a worker thread (AuditThread, what the edge runs). Nothing is dropped: a failed
 * batch is retried, and while the queue is past `maxQueued` the edge refuses to decide
 * (`overloaded()`), so an allow is never given that could not be recorded.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { appendAudit, type AuditEntry } from '../shared/audit.ts';
import type { Db } from '../shared/db/pool.ts';
import type { FromThread, ThreadInputs, ToThread } from './audit-thread.ts';
import { AuditWriteError, isPoison } from './audit-poison.ts';
import { tenantIdPattern } from '../shared/tenant-id.ts';
import {
  emptyInputStats,
  InputRecorder,
  recordedEntryJson,
  sampled,
  type DecisionInputsConfig,
  type InputStats,
  type RecordedEntry,
  type ReplayInput,
} from './decision-inputs.ts';

/** Where a batch goes: one transaction that appends it to the hash chain. */
export interface AuditSink {
  write(batch: RecordedEntry[]): Promise<void>;
  /**
   * The same, for entries already encoded (`encodeEntry`): a sink that takes them has the writer
   * encode each entry once, off the answer, and keep only its bytes queued (issue 18 item 1).
   */
  writeEncoded?(batch: readonly Buffer[]): Promise<void>;
  close?(): Promise<void>;
  /** Issue 22 item 1: what the decision-input recorder did so far (metrics). */
  inputStats?(): InputStats;
}

/** Writes on the calling thread (tests, tools); records decision inputs when `inputs` is set. */
export function inlineSink(db: Db, inputs?: Omit<DecisionInputsConfig, 'sample'>): AuditSink {
  const recorder = inputs ? new InputRecorder(db, inputs) : undefined;
  return {
    write: async (batch) => {
      // Nothing to write (AuditWriter.warm: this sink has no thread to start, and the pool is
      // warmed by warmPool): no transaction, which on a silent database would hold a connection.
      if (batch.length === 0) return;
      const ids = await db.tx((client) => appendAudit(client, batch));
      recorder?.afterAudit(batch, ids);
    },
    close: async () => {
      await recorder?.settle();
    },
    inputStats: () => recorder?.stats ?? emptyInputStats(),
  };
}

/** JSON would turn NaN and Infinity into null: a record is stored as made or not at all (a poison entry). */
function refuseNonFinite(key: string, value: unknown): unknown {
  if (typeof value === 'number' && !Number.isFinite(value))
    throw new TypeError(`audit value ${key} is ${value}: not storable in canonical JSON`);
  return value;
}

/**
 * An entry as the audit thread reads it: its JSON (recordedEntryJson, numbers JSON cannot hold
 * refused) as UTF-8 bytes outside the JavaScript heap. Queued as objects, a decision's entry and
 * its recorded input (about 1.6 KB a Check at 1,000 Checks/s) outlived two scavenges whenever the
 * audit thread's transaction took longer than the gap between them, and were promoted into the old
 * generation, whose growth brings on the major GCs that make the edge's tail (issue 18 item 1).
 * Throws (TypeError) for an entry that cannot be encoded: it stays an object, for the poison path.
 */
export function encodeEntry(entry: RecordedEntry): Buffer {
  return Buffer.from(entryText(entry));
}

/** An entry's JSON as the audit thread reads it: recordedEntryJson, numbers JSON cannot hold refused (TypeError). */
const entryText = (entry: RecordedEntry): string => recordedEntryJson(entry, refuseNonFinite);

/** entryText, or undefined for an entry that cannot be encoded. */
function entryJson(entry: RecordedEntry): string | undefined {
  try {
    return entryText(entry);
  } catch {
    return undefined;
  }
}

/** An encoded entry back as an object (what an inline sink and the poison path take). */
export function decodeEntry(bytes: Buffer): RecordedEntry {
  let read: Omit<RecordedEntry, 'ts'> & { ts?: string };
  try {
    read = JSON.parse(bytes.toString('utf8')) as typeof read;
  } catch {
    // A poison entry (audit-poison.ts): written around, recorded as unwritable, never retried.
    // Not JSON.parse's message: it quotes the text around the error, the unscrubbed input.
    throw new TypeError('audit entry does not read as JSON');
  }
  const { ts, ...e } = read;
  return ts === undefined ? e : { ...e, ts: new Date(ts) };
}

/** The JSON array of encoded entries, in a buffer of its own (so that it can be transferred). */
export function encodedBatch(parts: readonly Buffer[]): Buffer {
  let length = 2 + Math.max(0, parts.length - 1);
  for (const p of parts) length += p.length;
  const out = Buffer.allocUnsafeSlow(length);
  let at = 0;
  out[at++] = 0x5b; // [
  for (const [i, p] of parts.entries()) {
    if (i > 0) out[at++] = 0x2c; // ,
    at += p.copy(out, at);
  }
  out[at++] = 0x5d; // ]
  return out;
}

/** The longest the answering thread serialises a batch before letting waiting Checks run. */
export const serializeSliceMs = 0.2;

/**
 * `JSON.stringify(batch, refuseNonFinite)`, an entry at a time, yielding to the event loop every
 * `serializeSliceMs`. A whole batch at once (about 50 entries with their policy inputs at 1,000
 * Checks/s) held the thread answering Checks for 0.55 ms on average every 50 ms (6.6 ms at worst,
 * measured under the authz bench): about 1 % of Checks waited behind it, which is the p99 that
 * issue 18 item 1 measures.
 */
export async function serializeInSlices(batch: RecordedEntry[]): Promise<string> {
  const parts: string[] = [];
  let sliceStart = performance.now();
  for (const entry of batch) {
    parts.push(entryText(entry));
    if (performance.now() - sliceStart >= serializeSliceMs) {
      await new Promise<void>((r) => setImmediate(r));
      sliceStart = performance.now();
    }
  }
  return `[${parts.join(',')}]`;
}

/**
 * Writes on a worker thread (edge/audit-thread.ts) with its own pool, so hashing and sending
 * batches never stall the thread that answers Checks. A thread that dies fails its batches
 * (they stay queued and are retried) and is started again on the next write.
 */
export class AuditThread implements AuditSink {
  private worker: Worker | undefined;
  private seq = 0;
  private closed = false;
  /** Batches sent and not answered, each with the thread it went to. */
  private readonly waiting = new Map<
    number,
    { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout; worker: Worker }
  >();
  private stats = emptyInputStats();

  /**
   * `timeoutMs`: a batch not answered by then counts as failed and the thread is replaced.
   * `inputs`: the thread also records decision inputs (issue 22 item 1).
   */
  constructor(
    private readonly databaseUrl: string,
    private readonly timeoutMs = 30_000,
    private readonly inputs?: ThreadInputs,
  ) {}

  inputStats(): InputStats {
    return this.stats;
  }

  private settle(id: number, err?: Error): void {
    const p = this.waiting.get(id);
    if (!p) return;
    this.waiting.delete(id);
    clearTimeout(p.timer);
    if (err) p.reject(err);
    else p.resolve();
  }

  private spawn(): Worker {
    // Loader hooks are per thread: the boot file registers tsx, then loads audit-thread.ts.
    const w = new Worker(new URL('./audit-thread-boot.mjs', import.meta.url), {
      workerData: { url: this.databaseUrl, ...(this.inputs ? { inputs: this.inputs } : {}) },
    });
    w.unref();
    w.on('message', (m: FromThread) => {
      if (m.type === 'inputs') this.stats = m.stats;
      if (m.type === 'done')
        this.settle(
          m.id,
          m.error ? new AuditWriteError(m.error.message, m.error.code, m.error.poison) : undefined,
        );
    });
    // Only this thread's batches: a thread replaced after a timeout exits while its successor
    // may already hold batches, which failing here would have written twice (retried once done).
    const fail = (err: Error) => {
      if (this.worker === w) this.worker = undefined;
      for (const [id, p] of [...this.waiting]) if (p.worker === w) this.settle(id, err);
    };
    w.on('error', fail);
    w.on('messageerror', fail);
    w.on('exit', (code) => fail(new Error(`audit thread exited with code ${code}`)));
    return w;
  }

  /**
   * At least once: a thread that dies (or times out) after committing a batch but before
   * answering makes the batch fail here, and its retry writes those entries a second time.
   */
  async write(batch: RecordedEntry[]): Promise<void> {
    if (this.closed) throw new Error('audit thread is closed');
    const text = await serializeInSlices(batch);
    return this.send(text, batch.length);
  }

  /** Entries the writer encoded as they came: one buffer, handed over (transferred, not copied). */
  writeEncoded(batch: readonly Buffer[]): Promise<void> {
    if (this.closed) return Promise.reject(new Error('audit thread is closed'));
    return this.send(encodedBatch(batch), batch.length);
  }

  /** `entries`, the JSON array of `count` entries, to the thread (which refuses it read as any other count). */
  private send(entries: string | Buffer, count: number): Promise<void> {
    if (this.closed) return Promise.reject(new Error('audit thread is closed'));
    const w = (this.worker ??= this.spawn());
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.settle(id, new Error(`audit thread did not answer within ${this.timeoutMs} ms`));
        if (this.worker === w) this.worker = undefined;
        void w.terminate();
      }, this.timeoutMs);
      this.waiting.set(id, { resolve, reject, timer, worker: w });
      const message = { type: 'write', id, entries, count } satisfies ToThread;
      if (typeof entries === 'string') w.postMessage(message);
      else w.postMessage(message, [entries.buffer as ArrayBuffer]);
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    if (!w) return;
    this.worker = undefined;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 5000);
      w.on('message', (m: FromThread) => {
        if (m.type === 'closed') {
          clearTimeout(timer);
          resolve();
        }
      });
      w.postMessage({ type: 'close' } satisfies ToThread);
    });
    await w.terminate();
  }
}

/**
 * Small batches, often: with the inline sink, hashing and sending a batch runs on the thread
 * that answers Checks (a batch of 500 every 200 ms put a 10 ms stall into every fifth of a
 * second); the edge itself uses AuditThread, where batches only cross a message port.
 */
export const auditFlushMs = 50;
export const auditBatchMax = 128;
export const maxQueued = 20_000;
/** Room past the bound for fail-closed denials, which keep coming while decisions are refused. */
export const failClosedReserve = 10_000;

/** What is kept of an entry that cannot be stored: who, what and when, and why not. */
function unwritable(e: AuditEntry, err: unknown): AuditEntry {
  const safe = (v: unknown) => (typeof v === 'string' ? v.replace(/[^\x20-\x7e]/g, '?').slice(0, 200) : '');
  return {
    tenantId: tenantIdPattern.test(e.tenantId) ? e.tenantId : '_platform',
    actor: { type: safe(e.actor.type), id: safe(e.actor.id) },
    action: 'audit.unwritable',
    target: { type: safe(e.target.type), id: safe(e.target.id) },
    attrs: { original_action: safe(e.action), error: safe((err as Error).message) },
    // An invalid Date (a RangeError to store) would make the record as poison as the entry: retried for ever.
    ...(e.ts instanceof Date && !Number.isNaN(e.ts.getTime()) ? { ts: e.ts } : {}),
  };
}

/** A queued entry: encoded (encodeEntry) for a sink that takes encoded entries, else the entry itself. */
type Queued = RecordedEntry | Buffer;
const entryOf = (q: Queued): RecordedEntry => (Buffer.isBuffer(q) ? decodeEntry(q) : q);
/** entryOf for the poison path: an encoded entry that no longer reads still gets its audit.unwritable record. */
function readableEntryOf(q: Queued): AuditEntry {
  try {
    return entryOf(q);
  } catch {
    return (
      (Buffer.isBuffer(q) && headOf(q)) || {
        tenantId: '_platform',
        actor: { type: 'unknown', id: '' },
        action: 'audit.unreadable',
        target: { type: 'unknown', id: '' },
      }
    );
  }
}
/**
 * Who, what and when of an encoded entry whose replay input does not read: recordedEntryJson writes
 * `replay` last, so the text before its top-level `,"replay":` is the rest of the entry (an earlier
 * occurrence, nested in the entry's own members, leaves braces open and does not parse).
 */
function headOf(bytes: Buffer): AuditEntry | undefined {
  const text = bytes.toString('utf8');
  let at = text.indexOf(',"replay":');
  for (let tries = 0; at > 0 && tries < 16; tries += 1, at = text.indexOf(',"replay":', at + 1)) {
    let head: Partial<Record<keyof AuditEntry, unknown>>;
    try {
      head = JSON.parse(`${text.slice(0, at)}}`) as typeof head;
    } catch {
      continue;
    }
    const { tenantId, actor, action, target, ts } = head;
    if (typeof tenantId !== 'string' || !isObject(actor) || !isObject(target)) return undefined;
    const when = typeof ts === 'string' ? new Date(ts) : undefined;
    return {
      tenantId,
      actor: actor as AuditEntry['actor'],
      action: typeof action === 'string' ? action : 'audit.unreadable',
      target: target as AuditEntry['target'],
      ...(when && !Number.isNaN(when.getTime()) ? { ts: when } : {}),
    };
  }
  return undefined;
}
const isObject = (v: unknown): boolean => typeof v === 'object' && v !== null && !Array.isArray(v);
/** The batch's buffers when every entry in it is encoded; undefined when one is not (an entry that cannot be). */
function encodedOnly(batch: readonly Queued[]): Buffer[] | undefined {
  const out: Buffer[] = [];
  for (const q of batch) {
    if (!Buffer.isBuffer(q)) return undefined;
    out.push(q);
  }
  return out;
}

export class AuditWriter {
  private queue: Queued[] = [];
  /**
   * Entries pushed this turn of the event loop, for a sink that takes encoded entries: encoded
   * together once the turn's answers have gone (setImmediate), so a Check never waits for its
   * audit entry's JSON, and the objects die young.
   */
  private fresh: RecordedEntry[] = [];
  private encodeScheduled = false;
  /** Issue 22 item 1: which decisions' inputs travel with their audit entry (none until set). */
  private inputs: { sample: number; retentionDays: (purpose: string) => number | undefined } | undefined;
  private sampledOut = 0;
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Fail-closed denials past the reserve: counted, then recorded as one entry once writes resume. */
  private unrecorded: { count: number; from: Date; to: Date; sample: AuditEntry } | undefined;

  private readonly sink: AuditSink;

  constructor(
    db: Db,
    private readonly log: Logger,
    private readonly bound = maxQueued,
    private readonly reserve = failClosedReserve,
    sink?: AuditSink,
  ) {
    this.sink = sink ?? inlineSink(db);
  }

  /** Issue 15 item 9: start the writer thread and its connection before the first decision needs them. */
  async warm(): Promise<void> {
    await this.sink.write([]);
  }

  /** Flush what is queued every `everyMs` (auditFlushMs; another interval for the authz bench's comparison). */
  start(everyMs = auditFlushMs): void {
    this.timer = setInterval(() => this.tick(), everyMs);
    this.timer.unref();
  }

  /** True when decisions must stop: the writer is too far behind. */
  overloaded(): boolean {
    return this.pending() >= this.bound;
  }

  /** Record decision inputs for replay: a `sample` of decisions, kept at most a purpose's `retentionDays`. */
  recordInputs(opts: { sample: number; retentionDays: (purpose: string) => number | undefined }): void {
    this.inputs = opts;
  }

  /** Decision inputs recorded, failed, expired, dropped partitions, bytes kept (edge_decision_inputs). */
  inputStats(): InputStats & { sampledOut: number } {
    return { ...(this.sink.inputStats?.() ?? emptyInputStats()), sampledOut: this.sampledOut };
  }

  /**
   * `replay`: the decision's policy input. Nothing is serialised in the Check: for the audit thread
   * the entry is encoded after the turn's answers (encodeFresh), for another sink with its batch at
   * flush time; the sink (the audit thread) scrubs and writes the input.
   */
  push(entry: AuditEntry, replay?: ReplayInput): void {
    const e = replay ? this.withInput(entry, replay) : entry;
    if (!this.sink.writeEncoded) {
      this.queue.push(e);
      if (this.queue.length >= auditBatchMax) this.tick();
      return;
    }
    this.fresh.push(e);
    if (!this.encodeScheduled) {
      this.encodeScheduled = true;
      setImmediate(this.encodeTurn);
    }
  }

  /** After a turn's answers: its entries encoded, and a whole batch sent at once as push() would. */
  private readonly encodeTurn = (): void => {
    this.encodeScheduled = false;
    this.encodeFresh();
    if (this.queue.length >= auditBatchMax) this.tick();
  };

  /**
   * The entries pushed since the last time, encoded into the queue in push order (one that cannot
   * be stays an object). The turn's entries share one buffer of their own, exactly their size: a
   * small Buffer.from would be a slice of Node's shared 8 KB pool, and a queued entry would keep a
   * whole pool chunk (other buffers' bytes included) alive for as long as the database is behind.
   */
  private encodeFresh(): void {
    const fresh = this.fresh;
    if (fresh.length === 0) return;
    this.fresh = [];
    const texts = fresh.map(entryJson);
    let length = 0;
    for (const t of texts) if (t !== undefined) length += Buffer.byteLength(t);
    const chunk = Buffer.allocUnsafeSlow(length);
    let at = 0;
    for (const [i, t] of texts.entries()) {
      if (t === undefined) {
        this.queue.push(fresh[i] as RecordedEntry);
        continue;
      }
      const n = chunk.write(t, at);
      this.queue.push(chunk.subarray(at, at + n));
      at += n;
    }
  }

  /** The entry carrying its input when recording is on and the decision is sampled. */
  private withInput(entry: AuditEntry, replay: ReplayInput): RecordedEntry {
    if (!this.inputs) return entry;
    if (!sampled(this.inputs.sample)) {
      this.sampledOut += 1;
      return entry;
    }
    const days = this.inputs.retentionDays(String(entry.decision?.purpose ?? ''));
    return { ...entry, replay: days === undefined ? replay : { ...replay, retentionDays: days } };
  }

  /**
   * A fail-closed denial. It is queued even past the bound (decisions have stopped, so these are
   * all that arrive) up to `failClosedReserve` more; beyond that they are counted and written as
   * one `authz.unrecorded` entry (count, first and last time, one example) when the queue drains.
   */
  pushFailClosed(entry: AuditEntry): void {
    if (this.pending() < this.bound + this.reserve) {
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
    return this.queue.length + this.fresh.length;
  }

  /** Fail-closed denials counted past the reserve and not yet recorded (edge_audit_unrecorded). */
  unrecordedCount(): number {
    return this.unrecorded?.count ?? 0;
  }

  /** Write everything queued so far (serialised: one batch at a time, in order). */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    this.flushing = this.drain(true).finally(() => {
      this.flushing = undefined;
    });
    await this.flushing;
  }

  /**
   * The timer's (and a full batch's) write: what is queued now, then further batches only while a
   * whole one is waiting. Entries arriving during a write wait for the next tick instead of going
   * at once in a small batch: at 1,000 decisions/s, sending the remainder at once made batches of
   * about 8 entries (one batch per write's round trips), so the per-batch cost (transaction, round
   * trips, WAL flush) was paid six times as often as with the tick's ~50 (issue 18 item 1).
   */
  private tick(): void {
    this.flushing ??= this.drain(false).finally(() => {
      this.flushing = undefined;
    });
  }

  /**
   * Queue the record of the fail-closed denials counted past the reserve, once the queue is back
   * under the bound. Checked after every batch too: a flush (stop()'s last one) that starts at or
   * past the bound drains below it, and the record must go with that flush, not wait for a tick
   * that never comes.
   */
  private queueUnrecorded(): void {
    if (!this.unrecorded || this.pending() >= this.bound) return;
    // In push order: what was pushed before goes first.
    this.encodeFresh();
    const u = this.unrecorded;
    this.unrecorded = undefined;
    this.queue.push({
      ...u.sample,
      action: 'authz.unrecorded',
      ts: u.to,
      attrs: { ...u.sample.attrs, count: u.count, from: u.from.toISOString(), to: u.to.toISOString() },
    });
  }

  private async drain(all: boolean): Promise<void> {
    this.encodeFresh();
    this.queueUnrecorded();
    let first = true;
    while (this.more(all, first)) {
      first = false;
      const batch = this.queue.slice(0, auditBatchMax);
      try {
        await this.writeBatch(batch);
        this.queue.splice(0, batch.length);
        this.queueUnrecorded();
        // Let waiting Checks run between batches of a backlog.
        if (this.queue.length > 0) await new Promise<void>((r) => setImmediate(r));
      } catch (err) {
        if (!isPoison(err)) {
          this.log.warn(
            { err: (err as Error).message, pending: this.queue.length },
            'decision audit write failed; will retry',
          );
          return;
        }
        // One bad entry must not hold every later one back (and, past the bound, stop all
        // decisions): the batch is written entry by entry, a bad entry replaced by a record of it.
        const written = await this.oneByOne(batch);
        this.queue.splice(0, written);
        this.queueUnrecorded();
        if (written < batch.length) return;
      }
    }
  }

  /**
   * Whether drain() writes another batch. A flush writes everything, entries pushed during its
   * writes too: those still waiting for their turn's encoding (a Check answered in the turn its
   * batch's answer came) are encoded now, or flush() (stop()'s last one) would return with them
   * unwritten. A tick leaves them to that encoding, which starts a write of its own for a whole batch.
   */
  private more(all: boolean, first: boolean): boolean {
    if (all) this.encodeFresh();
    return this.queue.length > 0 && (all || first || this.queue.length >= auditBatchMax);
  }

  /** One batch to the sink: as bytes when it takes them and every entry is encoded, else as objects. */
  private writeBatch(batch: readonly Queued[]): Promise<void> {
    const encoded = this.sink.writeEncoded ? encodedOnly(batch) : undefined;
    return encoded && this.sink.writeEncoded
      ? this.sink.writeEncoded(encoded)
      : this.sink.write(batch.map(entryOf));
  }

  /** Write `batch` an entry at a time; returns how many were dealt with before a transient error. */
  private async oneByOne(batch: readonly Queued[]): Promise<number> {
    for (const [i, queued] of batch.entries()) {
      try {
        await this.writeBatch([queued]);
      } catch (err) {
        if (!isPoison(err)) return i;
        const entry = readableEntryOf(queued);
        this.log.error(
          { err: (err as Error).message, action: entry.action },
          'decision audit entry cannot be stored; recorded as audit.unwritable',
        );
        try {
          await this.sink.write([unwritable(entry, err)]);
        } catch {
          return i;
        }
      }
    }
    return batch.length;
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
    await this.sink.close?.();
    if (this.pending() > 0 || this.unrecorded) {
      this.log.error(
        { pending: this.pending(), unrecorded: this.unrecorded?.count ?? 0 },
        'decision audit stopped with entries it could not write',
      );
    }
  }
}
