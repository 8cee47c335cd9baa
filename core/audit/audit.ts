/**
 * The audit log (SPEC 2.8): append-only and hash-chained per tenant. Each row's hash covers
 * the previous row's hash and the canonical JSON of the record, so any edit, deletion or
 * reordering breaks the chain at a point `verifyChain` reports.
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../lib/canonical-json.ts';
import type { Db, Queryable } from '../db/pool.ts';

export interface AuditEntry {
  tenantId: string;
  actor: { type: string; id: string };
  /** e.g. `auth.login`, `transfer.create`, `authz.decision`. */
  action: string;
  target: { type: string; id: string };
  /** allow, policy version, purpose, aal, trace id. */
  decision?: Record<string, unknown>;
  /** ip, ua, risk, masking rule, registry version, outcome. Never secrets. */
  attrs?: Record<string, unknown>;
  ts?: Date;
}

const genesis: Buffer = Buffer.alloc(32);

function rowHash(prev: Buffer, e: Required<Omit<AuditEntry, 'ts'>> & { ts: string }): Buffer {
  const record = canonicalJson({
    ts: e.ts, tenant_id: e.tenantId, actor: e.actor, action: e.action, target: e.target, decision: e.decision, attrs: e.attrs,
  });
  return createHash('sha256').update(prev).update(record).digest();
}

/**
 * Append entries (all of one or many tenants) inside the caller's transaction. The head row
 * lock orders appends per tenant; tenants are locked in sorted order so batches never deadlock.
 */
export async function appendAudit(client: Queryable, entries: AuditEntry[]): Promise<number[]> {
  if (entries.length === 0) return [];
  const tenants = [...new Set(entries.map((e) => e.tenantId))].sort();
  // One round trip creates missing heads and locks every head, in tenant order (no deadlocks);
  // DO UPDATE is what makes ON CONFLICT lock the existing row and return it.
  const { rows: headRows } = await client.query<{ tenant_id: string; last_hash: Buffer }>(
    `INSERT INTO audit_chain_heads (tenant_id, last_hash) SELECT t, $2 FROM unnest($1::text[]) AS t ORDER BY t
     ON CONFLICT (tenant_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
     RETURNING tenant_id, last_hash`,
    [tenants, genesis],
  );
  const heads = new Map(headRows.map((r) => [r.tenant_id, r.last_hash]));
  // Hashes are computed here in order; one INSERT writes the rows in that same order, so ids
  // (which verifyChain walks) follow the chain.
  const cols = { ts: [] as string[], tenant: [] as string[], actor: [] as string[], action: [] as string[], target: [] as string[], decision: [] as string[], attrs: [] as string[], prev: [] as Buffer[], hash: [] as Buffer[] };
  for (const e of entries) {
    const prev = heads.get(e.tenantId) ?? genesis;
    const full = { tenantId: e.tenantId, actor: e.actor, action: e.action, target: e.target, decision: e.decision ?? {}, attrs: e.attrs ?? {}, ts: (e.ts ?? new Date()).toISOString() };
    const hash = rowHash(prev, full);
    heads.set(e.tenantId, hash);
    cols.ts.push(full.ts);
    cols.tenant.push(full.tenantId);
    cols.actor.push(JSON.stringify(full.actor));
    cols.action.push(full.action);
    cols.target.push(JSON.stringify(full.target));
    cols.decision.push(JSON.stringify(full.decision));
    cols.attrs.push(JSON.stringify(full.attrs));
    cols.prev.push(prev);
    cols.hash.push(hash);
  }
  // One more round trip writes the rows (in chain order, so ids follow it) and moves the heads.
  const { rows } = await client.query<{ id: string }>(
    `WITH ins AS (
       INSERT INTO audit_log (ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash)
       SELECT ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash
       FROM unnest($1::timestamptz[], $2::text[], $3::jsonb[], $4::text[], $5::jsonb[], $6::jsonb[], $7::jsonb[], $8::bytea[], $9::bytea[])
            WITH ORDINALITY AS u(ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash, n)
       ORDER BY n
       RETURNING id, tenant_id
     ), last AS (SELECT tenant_id, max(id) AS last_id FROM ins GROUP BY tenant_id),
     moved AS (
       UPDATE audit_chain_heads h SET last_id = last.last_id, last_hash = u.last_hash
       FROM last JOIN unnest($10::text[], $11::bytea[]) AS u(tenant_id, last_hash) USING (tenant_id)
       WHERE h.tenant_id = last.tenant_id
     )
     SELECT id FROM ins ORDER BY id`,
    [cols.ts, cols.tenant, cols.actor, cols.action, cols.target, cols.decision, cols.attrs, cols.prev, cols.hash,
      tenants, tenants.map((t) => heads.get(t) ?? genesis)],
  );
  return rows.map((r) => Number(r.id));
}

/** Append in a transaction of its own (for events not tied to another change). */
export function audit(db: Db, ...entries: AuditEntry[]): Promise<number[]> {
  return db.tx((client) => appendAudit(client, entries));
}

export type ChainReport = { ok: true; count: number } | { ok: false; count: number; brokenAt: number; reason: string };

/** Walk one tenant's chain from the start; report the first row whose link or hash is wrong. */
export async function verifyChain(q: Queryable, tenantId: string, batchSize = 1000): Promise<ChainReport> {
  let prev: Buffer = genesis;
  let lastId = 0;
  let count = 0;
  for (;;) {
    const { rows } = await q.query<{ id: string; ts: Date; actor: AuditEntry['actor']; action: string; target: AuditEntry['target']; decision: Record<string, unknown>; attrs: Record<string, unknown>; prev_hash: Buffer; row_hash: Buffer }>(
      `SELECT id, ts, actor, action, target, decision, attrs, prev_hash, row_hash FROM audit_log
       WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
      [tenantId, lastId, batchSize],
    );
    if (rows.length === 0) return { ok: true, count };
    for (const r of rows) {
      const id = Number(r.id);
      if (!r.prev_hash.equals(prev)) return { ok: false, count, brokenAt: id, reason: 'prev_hash does not match the previous row' };
      const expected = rowHash(prev, { tenantId, actor: r.actor, action: r.action, target: r.target, decision: r.decision, attrs: r.attrs, ts: r.ts.toISOString() });
      if (!expected.equals(r.row_hash)) return { ok: false, count, brokenAt: id, reason: 'row_hash does not match the record' };
      prev = r.row_hash;
      lastId = id;
      count++;
    }
  }
}

