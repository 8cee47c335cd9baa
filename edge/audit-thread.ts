/**
 * The decision audit's writer thread (AuditThread in audit-writer.ts): hashing a batch into the
 * chain and sending it to PostgreSQL cost about as much as a Check each, so they run here,
 * beside the thread that answers Checks rather than inside it. One connection pool of its own;
 * each batch is one transaction; the answer (done or the error) goes back by message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { appendAudit } from '../shared/audit.ts';
import { isPoison } from './audit-poison.ts';
import { createDb } from '../shared/db/pool.ts';
import { createLogger } from '../shared/log.ts';
import { createMetrics } from '../shared/metrics.ts';
import {
  InputRecorder,
  type DecisionInputsConfig,
  type InputStats,
  type RecordedEntry,
} from './decision-inputs.ts';

/**
 * A batch crosses as one JSON text: structured cloning fifty small nested objects cost the
 * answering thread about 3 ms per batch (a sixth of its time at 1,000 Checks/s, issue 18
 * item 1); JSON.stringify of the same batch costs a few per cent of that.
 */
export type ToThread =
  | {
      type: 'write';
      id: number;
      /** The batch's JSON array: text, or its UTF-8 bytes (entries the writer encoded as they came). */
      entries: string | Uint8Array;
      /**
       * How many entries the writer put in it. An entry's replay input is spliced in as JSON text
       * (recordedEntryJson): were a text ever to close its entry and open another, the array would
       * read as more entries than were sent, one of them of the text's making (another tenant's,
       * say). A batch that does not read as exactly this many is refused as poison.
       */
      count: number;
    }
  | { type: 'close' };
export type FromThread =
  | { type: 'done'; id: number; error?: { message: string; code?: string; poison: boolean } }
  | { type: 'closed' }
  | { type: 'inputs'; stats: InputStats };
/** Issue 22 item 1: set when decision inputs are recorded (the pseudonym key stays in this thread's memory). */
export type ThreadInputs = Omit<DecisionInputsConfig, 'sample'>;

const port = parentPort;
if (!port) throw new Error('audit-thread.ts runs as a worker thread');
const { url, inputs } = workerData as { url: string; inputs?: ThreadInputs };
const db = createDb({ connectionString: url, metrics: createMetrics(), log: createLogger('silent'), max: 2 });
const reply = (m: FromThread) => port.postMessage(m);
const utf8 = new TextDecoder();
// Inputs are written after their audit batch is answered: the audit never waits for them.
const recorder = inputs
  ? new InputRecorder(db, { ...inputs, key: Buffer.from(inputs.key) }, (stats) =>
      reply({ type: 'inputs', stats: { ...stats } }),
    )
  : undefined;
recorder?.start();
void recorder?.housekeep();

/** Why a batch is refused whole as poison (never the text's own words: they are the unscrubbed input). */
class PoisonBatch extends Error {}

/** A batch's entries as sent (JSON text or its UTF-8 bytes), `count` of them, their times as Dates. */
function batchOf(sent: string | Uint8Array, count: number): RecordedEntry[] {
  const text = typeof sent === 'string' ? sent : utf8.decode(sent);
  let read: unknown;
  try {
    read = JSON.parse(text);
  } catch {
    // Not JSON.parse's message: it quotes the text around the error, the unscrubbed input.
    throw new PoisonBatch('audit batch does not read as JSON');
  }
  if (!Array.isArray(read) || read.length !== count)
    throw new PoisonBatch(
      `audit batch reads as ${Array.isArray(read) ? read.length : 'no'} entries, not the ${count} sent`,
    );
  return (read as (Omit<RecordedEntry, 'ts'> & { ts?: string })[]).map(
    ({ ts, ...e }): RecordedEntry => (ts === undefined ? e : { ...e, ts: new Date(ts) }),
  );
}

port.on('message', (m: ToThread) => {
  if (m.type === 'close') {
    void (recorder?.settle() ?? Promise.resolve())
      .then(() => db.close())
      .finally(() => reply({ type: 'closed' }));
    return;
  }
  let entries: RecordedEntry[];
  try {
    entries = batchOf(m.entries, m.count);
  } catch (err) {
    // A batch that does not read, or not as the entries sent (neither can happen while every text
    // comes from JSON.stringify), is refused as poison, none of it written: the writer then
    // records its entries one by one, the bad one as audit.unwritable in its own tenant, instead
    // of this thread dying and the batch being retried for ever.
    const message = err instanceof PoisonBatch ? err.message : 'audit batch does not read';
    reply({ type: 'done', id: m.id, error: { message, poison: true } });
    return;
  }
  db.tx((client) => appendAudit(client, entries)).then(
    (ids) => {
      reply({ type: 'done', id: m.id });
      recorder?.afterAudit(entries, ids);
    },
    (err: unknown) =>
      reply({
        type: 'done',
        id: m.id,
        error: {
          message: (err as Error).message,
          code: (err as { code?: string }).code,
          poison: isPoison(err),
        },
      }),
  );
});
