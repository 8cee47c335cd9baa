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
  const ids: number[] = [];
  const tenants = [...new Set(entries.map((e) => e.tenantId))].sort();
  const heads = new Map<string, Buffer>();
  for (const t of tenants) {
    await client.query('INSERT INTO audit_chain_heads (tenant_id, last_hash) VALUES ($1, $2) ON CONFLICT DO NOTHING', [t, genesis]);
    const { rows } = await client.query<{ last_hash: Buffer }>('SELECT last_hash FROM audit_chain_heads WHERE tenant_id = $1 FOR UPDATE', [t]);
    heads.set(t, rows[0]?.last_hash ?? genesis);
  }
  for (const e of entries) {
    const prev = heads.get(e.tenantId) ?? genesis;
    const full = { tenantId: e.tenantId, actor: e.actor, action: e.action, target: e.target, decision: e.decision ?? {}, attrs: e.attrs ?? {}, ts: (e.ts ?? new Date()).toISOString() };
    const hash = rowHash(prev, full);
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO audit_log (ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
      [full.ts, full.tenantId, JSON.stringify(full.actor), full.action, JSON.stringify(full.target), JSON.stringify(full.decision), JSON.stringify(full.attrs), prev, hash],
    );
    const id = Number(rows[0]?.id);
    ids.push(id);
    heads.set(e.tenantId, hash);
    await client.query('UPDATE audit_chain_heads SET last_id = $2, last_hash = $3 WHERE tenant_id = $1', [e.tenantId, id, hash]);
  }
  return ids;
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

