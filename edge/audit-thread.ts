/**
 * The decision audit's writer thread (AuditThread in audit-writer.ts): hashing a batch into the
 * chain and sending it to PostgreSQL cost about as much as a Check each, so they run here,
 * beside the thread that answers Checks rather than inside it. One connection pool of its own;
 * each batch is one transaction; the answer (done or the error) goes back by message.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { appendAudit, type AuditEntry } from '../shared/audit.ts';
import { isPoison } from './audit-poison.ts';
import { createDb } from '../shared/db/pool.ts';
import { createLogger } from '../shared/log.ts';
import { createMetrics } from '../shared/metrics.ts';

export type ToThread = { type: 'write'; id: number; entries: AuditEntry[] } | { type: 'close' };
export type FromThread = { type: 'done'; id: number; error?: { message: string; code?: string; poison: boolean } } | { type: 'closed' };

const port = parentPort;
if (!port) throw new Error('audit-thread.ts runs as a worker thread');
const { url } = workerData as { url: string };
const db = createDb({ connectionString: url, metrics: createMetrics(), log: createLogger('silent'), max: 2 });
const reply = (m: FromThread) => port.postMessage(m);

port.on('message', (m: ToThread) => {
  if (m.type === 'close') {
    void db.close().finally(() => reply({ type: 'closed' }));
    return;
  }
  db.tx((client) => appendAudit(client, m.entries)).then(
    () => reply({ type: 'done', id: m.id }),
    (err: unknown) => reply({ type: 'done', id: m.id, error: { message: (err as Error).message, code: (err as { code?: string }).code, poison: isPoison(err) } }),
  );
});
