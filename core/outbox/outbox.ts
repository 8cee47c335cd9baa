/** Writing outbox events inside the caller's transaction (DESIGN.md "Events"). */
import type { Queryable } from '../../shared/db/pool.ts';
import { uuidv7 } from '../../shared/uuid.ts';

export interface OutboxEvent {
  tenantId: string;
  /** e.g. `posting`, `transfer`, `session`. */
  aggregate: string;
  aggregateId: string;
  /** `<aggregate>.<past-tense verb>`, e.g. `posting.created`. */
  event: string;
  payload: Record<string, unknown>;
  headers?: Record<string, string>;
}

/**
 * Insert one event; call it with the client of the transaction that makes the change.
 * created_at is the statement's clock, not the transaction's start: two events of one aggregate
 * written in one transaction are routed (ORDER BY created_at, id) in the order they were written,
 * even within one millisecond, where the random part of two UUIDv7 ids would decide.
 */
export async function enqueue(q: Queryable, e: OutboxEvent): Promise<string> {
  const id = uuidv7();
  await q.query(
    `INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload, headers, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp())`,
    [
      id,
      e.tenantId,
      e.aggregate,
      e.aggregateId,
      e.event,
      JSON.stringify(e.payload),
      JSON.stringify(e.headers ?? {}),
    ],
  );
  return id;
}
