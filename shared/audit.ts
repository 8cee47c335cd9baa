/**
 * The audit log (SPEC 2.8): append-only and hash-chained per tenant. Each row's hash covers
 * the previous row's hash and the canonical JSON of the record, so any edit, deletion or
 * reordering breaks the chain at a point `verifyChain` reports.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import { canonicalJson } from './canonical-json.ts';
import type { Db, Queryable, TxClient } from './db/pool.ts';
import { sqlLiteral } from './db/literal.ts';

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

/**
 * The decision and request facts of the request a service is serving (SPEC 2.8; issue 20 item
 * 5): the edge's policy and registry versions, purpose, AAL, trace and decision ids, and the
 * request's ip, ua and risk. Core's HTTP pipeline runs every handler inside them
 * (core/http/audit-facts.ts), so every record appended while serving the request carries the
 * decision that let it through, whichever module writes it. Outside a request (timers, the
 * edge's writer thread) there are none.
 */
export interface RequestAuditFacts {
  decision: Record<string, unknown>;
  attrs: Record<string, unknown>;
}

const requestFacts = new AsyncLocalStorage<RequestAuditFacts>();

/** Run `fn` (a request's handler) with the request's audit facts. */
export function withRequestAudit<T>(facts: RequestAuditFacts, fn: () => T): T {
  return requestFacts.run(facts, fn);
}

/**
 * Run `fn` outside any request's facts: work that appends records gathered from many requests
 * (the ledger batcher) must not stamp them all with whichever request happened to start it.
 */
export function withoutRequestAudit<T>(fn: () => T): T {
  return requestFacts.exit(fn);
}

/**
 * `e` with the current request's facts merged under its own decision and attrs: what the
 * writer states itself (a refused login's `allow: false`, the session's new AAL) wins.
 */
export function withRequestFacts(e: AuditEntry): AuditEntry {
  const f = requestFacts.getStore();
  if (!f) return e;
  return { ...e, decision: { ...f.decision, ...e.decision }, attrs: { ...f.attrs, ...e.attrs } };
}

/**
 * The hashed record: canonical JSON of {ts, tenant_id, actor, action, target, decision, attrs},
 * built from each part's canonical text (the keys in their sorted order) so that appendAudit
 * can reuse those texts as the row's column values instead of serialising every part twice.
 * Byte-identical to canonicalJson of the whole object (test/audit checks it).
 */
interface RecordParts {
  ts: string;
  tenant: string;
  actor: string;
  action: string;
  target: string;
  decision: string;
  attrs: string;
}

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** NUL or any surrogate: only a string with one of these can need repair. */
const maybeUnstorable = /[\u0000\uD800-\uDFFF]/;

/**
 * A string PostgreSQL can store (no NUL, no lone surrogate): those become U+FFFD. Almost every
 * string has neither, and is returned as it is without two replacing passes (the audit thread's
 * most frequent call: issue 18 item 1 profile).
 */
export function storable(s: string): string {
  if (!maybeUnstorable.test(s)) return s;
  return s.replace(loneSurrogate, '\uFFFD').replaceAll('\u0000', '\uFFFD');
}

/**
 * Audit records carry request-derived text (a tenant id from a body, a user agent). A JSON body
 * can smuggle `\u0000` or a lone surrogate, which PostgreSQL refuses in text and jsonb: one such
 * record would fail its whole batch on every retry. Every string is made storable before it is
 * hashed, so what is hashed is exactly what is stored.
 */
function storableDeep(v: unknown): unknown {
  if (typeof v === 'string') return storable(v);
  if (Array.isArray(v)) return v.map(storableDeep);
  if (v && typeof v === 'object' && !(v instanceof Date)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[storable(k)] = storableDeep(x);
    return out;
  }
  return v;
}

function partsOf(e: Required<Omit<AuditEntry, 'ts'>> & { ts: string }): RecordParts {
  return {
    ts: JSON.stringify(e.ts),
    tenant: JSON.stringify(storable(e.tenantId)),
    actor: canonicalJson(storableDeep(e.actor)),
    action: JSON.stringify(storable(e.action)),
    target: canonicalJson(storableDeep(e.target)),
    decision: canonicalJson(storableDeep(e.decision)),
    attrs: canonicalJson(storableDeep(e.attrs)),
  };
}

function recordText(p: RecordParts): string {
  return `{"action":${p.action},"actor":${p.actor},"attrs":${p.attrs},"decision":${p.decision},"target":${p.target},"tenant_id":${p.tenant},"ts":${p.ts}}`;
}

function rowHash(prev: Buffer, p: RecordParts): Buffer {
  return createHash('sha256').update(prev).update(recordText(p)).digest();
}

/**
 * Append entries (all of one or many tenants) inside the caller's transaction: the one that
 * writes the change they record, so both commit or neither does (SPEC 2.8, 6.3). The head row
 * lock orders appends per tenant; tenants are locked in sorted order so batches never deadlock.
 * A record of its own (a decision or a read that changes nothing) goes through `audit(db, …)`.
 */
export async function appendAudit(client: TxClient, entries: AuditEntry[]): Promise<number[]> {
  // The type keeps the pool out; this keeps out a cast one. Through the pool the record would
  // commit apart from the change it records (and each query alone: a broken chain).
  if (isDb(client))
    throw new Error(
      'appendAudit needs the transaction of the change it records: db.tx, or audit(db, …) for a record of its own',
    );
  if (entries.length === 0) return [];
  const stored = auditEntriesOf(entries);
  const tenants = auditTenantsOf(stored);
  // One round trip creates missing heads and locks every head, in tenant order (no deadlocks);
  // DO UPDATE is what makes ON CONFLICT lock the existing row and return it.
  const { rows: headRows } = await client.query<{ tenant_id: string; last_hash: Buffer }>(
    auditHeadsLock(tenants),
  );
  const chained = chain(stored, new Map(headRows.map((r) => [r.tenant_id, r.last_hash])));
  // One more round trip writes the rows (in chain order, so ids follow it) and moves the heads.
  const { rows } = await client.query<{ id: string }>(
    `${insertRows('$1::jsonb', '$2::jsonb')} SELECT id FROM ins ORDER BY id`,
    [chained.doc, chained.heads],
  );
  return rows.map((r) => Number(r.id));
}

/** The entries as stored: the current request's facts merged in, the tenant id made storable. */
function auditEntriesOf(entries: AuditEntry[]): AuditEntry[] {
  return entries.map((e) => ({ ...withRequestFacts(e), tenantId: storable(e.tenantId) }));
}

/** The chains `entries` append to, in the order their heads are locked. */
function auditTenantsOf(entries: AuditEntry[]): string[] {
  return [...new Set(entries.map((e) => e.tenantId))].sort();
}

/**
 * Hashes computed here in order from each chain's head; the rows travel as one JSON document built
 * from the canonical texts already made for the hashes (PostgreSQL parses it; no per-element
 * array escaping in JavaScript), with each chain's new head.
 */
function chain(entries: AuditEntry[], heads: Map<string, Buffer>): { doc: string; heads: string } {
  let doc = '[';
  for (const [i, e] of entries.entries()) {
    const prev = heads.get(e.tenantId) ?? genesis;
    const parts = partsOf({
      tenantId: e.tenantId,
      actor: e.actor,
      action: e.action,
      target: e.target,
      decision: e.decision ?? {},
      attrs: e.attrs ?? {},
      ts: (e.ts ?? new Date()).toISOString(),
    });
    const hash = rowHash(prev, parts);
    heads.set(e.tenantId, hash);
    if (i > 0) doc += ',';
    doc += `{"ts":${parts.ts},"tenant_id":${parts.tenant},"actor":${parts.actor},"action":${parts.action},"target":${parts.target},"decision":${parts.decision},"attrs":${parts.attrs},"prev":"${prev.toString('hex')}","hash":"${hash.toString('hex')}"}`;
  }
  const moved = auditTenantsOf(entries).map((t) => ({
    tenant_id: t,
    last_hash: (heads.get(t) ?? genesis).toString('hex'),
  }));
  return { doc: `${doc}]`, heads: JSON.stringify(moved) };
}

/** The rows (`rows`, a jsonb document) written in chain order and the heads (`heads`) moved. */
function insertRows(rows: string, heads: string): string {
  return `WITH ins AS (
       INSERT INTO audit_log (ts, tenant_id, actor, action, target, decision, attrs, prev_hash, row_hash)
       SELECT (r->>'ts')::timestamptz, r->>'tenant_id', r->'actor', r->>'action', r->'target', r->'decision', r->'attrs',
              decode(r->>'prev', 'hex'), decode(r->>'hash', 'hex')
       FROM jsonb_array_elements(${rows}) WITH ORDINALITY AS u(r, n)
       ORDER BY n
       RETURNING id, tenant_id
     ), last AS (SELECT tenant_id, max(id) AS last_id FROM ins GROUP BY tenant_id),
     moved AS (
       UPDATE audit_chain_heads h SET last_id = last.last_id, last_hash = decode(u.last_hash, 'hex')
       FROM last JOIN jsonb_to_recordset(${heads}) AS u(tenant_id text, last_hash text) USING (tenant_id)
       WHERE h.tenant_id = last.tenant_id
     )`;
}

/**
 * appendAudit as two literal statements, for a caller that sends several statements per round
 * trip with the simple query protocol, which takes no parameters (the ledger batcher). Run in one
 * transaction, `auditHeadsLock` first: it creates and locks the chains' heads in the same order as
 * appendAudit and returns them (tenant_id, last_hash); `auditRowsWrite` appends the entries chained
 * from those heads and moves the heads.
 */
export function auditHeadsLock(tenantIds: string[]): string {
  const tenants = [...new Set(tenantIds.map(storable))].sort();
  return `INSERT INTO audit_chain_heads (tenant_id, last_hash)
     SELECT t, '\\x${genesis.toString('hex')}'::bytea FROM jsonb_array_elements_text(${sqlLiteral(JSON.stringify(tenants))}::jsonb) AS t ORDER BY t
     ON CONFLICT (tenant_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
     RETURNING tenant_id, last_hash`;
}

/** See auditHeadsLock: the rows of `entries`, chained from `heads`, and the heads moved. */
export function auditRowsWrite(
  entries: AuditEntry[],
  heads: { tenant_id: string; last_hash: Buffer }[],
): string {
  const chained = chain(auditEntriesOf(entries), new Map(heads.map((h) => [h.tenant_id, h.last_hash])));
  return `${insertRows(`${sqlLiteral(chained.doc)}::jsonb`, `${sqlLiteral(chained.heads)}::jsonb`)} SELECT count(*) FROM ins`;
}

function isDb(q: object): boolean {
  return 'pool' in q && typeof (q as Partial<Db>).tx === 'function';
}

/**
 * Append in a transaction of its own: for records of decisions and reads that change nothing
 * (a refused sign-in, an issued token, a listed page). A change's record goes in its transaction.
 */
export function audit(db: Db, ...entries: AuditEntry[]): Promise<number[]> {
  return db.tx((client) => appendAudit(client, entries));
}

export type ChainReport =
  | { ok: true; count: number }
  | { ok: false; count: number; brokenAt: number; reason: string };

/** Walk one tenant's chain from the start; report the first row whose link or hash is wrong. */
export async function verifyChain(q: Queryable, tenantId: string, batchSize = 1000): Promise<ChainReport> {
  let prev: Buffer = genesis;
  let lastId = 0;
  let count = 0;
  for (;;) {
    const { rows } = await q.query<{
      id: string;
      ts: Date;
      actor: AuditEntry['actor'];
      action: string;
      target: AuditEntry['target'];
      decision: Record<string, unknown>;
      attrs: Record<string, unknown>;
      prev_hash: Buffer;
      row_hash: Buffer;
    }>(
      `SELECT id, ts, actor, action, target, decision, attrs, prev_hash, row_hash FROM audit_log
       WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
      [tenantId, lastId, batchSize],
    );
    if (rows.length === 0) return { ok: true, count };
    for (const r of rows) {
      const id = Number(r.id);
      if (!r.prev_hash.equals(prev))
        return { ok: false, count, brokenAt: id, reason: 'prev_hash does not match the previous row' };
      const expected = rowHash(
        prev,
        partsOf({
          tenantId,
          actor: r.actor,
          action: r.action,
          target: r.target,
          decision: r.decision,
          attrs: r.attrs,
          ts: r.ts.toISOString(),
        }),
      );
      if (!expected.equals(r.row_hash))
        return { ok: false, count, brokenAt: id, reason: 'row_hash does not match the record' };
      prev = r.row_hash;
      lastId = id;
      count++;
    }
  }
}
