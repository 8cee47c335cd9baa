/**
 * Idempotency keys are probed by primary key, never scanned (migration 0920, issue 18 item 2).
 * While the key table is small (a fresh tenant, the morning) the planner prefers scanning it, and
 * a long-lived connection keeps the plans it made then while the table grows all day: the ledger
 * bench measured one whole-table scan per key and per batch. So the batch's key claim
 * (ledger_apply_keyed) and the responses' store (idempotency_complete) must plan no sequential
 * scan of idempotency_keys even on a small table. auto_explain shows the plan of every statement
 * run inside the functions.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { ledgerTenant, transferCmd } from './tenant-db.ts';

describe('idempotency key look-ups on the ledger write path', () => {
  let t: TestDb;
  let c: pg.Client;
  const tenant = 'keys-t';
  const principal = 'client:keys';
  let from = '';
  let to = '';
  const notices: string[] = [];

  before(async () => {
    t = await freshDatabase();
    const db = t.db;
    const open = await ledgerTenant(db, tenant);
    from = await open('SETTLEMENT');
    to = await open('WALLET_MAIN');
    // A small key table, with up-to-date statistics.
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash)
      SELECT $1, 'old-' || g, $2, 'POST', '/v1/core/postings', 'h' FROM generate_series(1, 40) g`,
      [tenant, principal],
    );
    await db.query('ANALYZE idempotency_keys');
    c = new pg.Client({ connectionString: t.url });
    await c.connect();
    c.on('notice', (n) => notices.push(n.message ?? ''));
    await c.query(`LOAD 'auto_explain'`);
    await c.query(
      `SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice; SET client_min_messages = notice`,
    );
  });
  after(async () => {
    await c.end();
    await t.drop();
  });

  const scansKeys = () => notices.some((n) => /Seq Scan on idempotency_keys/.test(n));
  /**
   * Scans of the key table's primary key whose condition does not name the key: a skip scan on
   * `principal` alone (PostgreSQL 18) reads the whole index, once per key of the batch.
   */
  const wholeIndexScans = (from: string[] = notices) =>
    from.flatMap((n) => {
      const lines = n.split('\n');
      return lines.flatMap((l, i) => {
        if (!/Scan using idempotency_keys_pkey on idempotency_keys/.test(l)) return [];
        const cond = lines.slice(i + 1, i + 4).find((x) => /Index Cond:/.test(x)) ?? '';
        return /\bkey = /.test(cond) ? [] : [`${l.trim()} / ${cond.trim()}`];
      });
    });
  const keyOf = (key: string) => ({
    tenant,
    key,
    principal,
    method: 'POST',
    path: '/v1/core/postings',
    hash: 'h',
  });
  const post = () => transferCmd(tenant, from, to, '1.000000');

  it('a plain join of the responses onto the key table scans it (why the guards exist)', async () => {
    notices.length = 0;
    await c.query('BEGIN');
    await c.query(
      `UPDATE idempotency_keys k SET response_status = d.status FROM jsonb_to_recordset($1::jsonb) AS d(tenant text, key text, principal text, status integer)
                    WHERE k.tenant_id = d.tenant AND k.key = d.key AND k.principal = d.principal`,
      [JSON.stringify([{ tenant, key: 'old-1', principal, status: 201 }])],
    );
    await c.query('ROLLBACK');
    assert.ok(scansKeys(), notices.join('\n'));
  });

  it("the claim's legacy check probes by key, whatever the table's size when it was planned", async () => {
    // A connection plans the claim while the key table is small, then the table grows: the
    // legacy check must stay a probe by key (or read the legacy rows' own index), not a skip
    // scan of the whole primary key on `principal` alone, once per key of every batch.
    const fresh = new pg.Client({ connectionString: t.url });
    await fresh.connect();
    const seen: string[] = [];
    try {
      const batch = async (tag: string) => {
        const keys = Array.from({ length: 16 }, (_, i) => `legacy-probe-${tag}-${i}`);
        await fresh.query('SELECT ledger_apply_keyed($1::jsonb, $2::jsonb)', [
          JSON.stringify(keys.map(keyOf)),
          JSON.stringify(keys.map(post)),
        ]);
      };
      await fresh.query('BEGIN');
      for (let b = 0; b < 8; b++) await batch(String(b));
      await fresh.query(
        `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash)
        SELECT $1, 'bulk-' || g, $2, 'POST', '/v1/core/postings', 'h' FROM generate_series(1, 5000) g`,
        [tenant, principal],
      );
      fresh.on('notice', (n) => seen.push(n.message ?? ''));
      await fresh.query(`LOAD 'auto_explain'`);
      await fresh.query(
        `SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice; SET client_min_messages = notice`,
      );
      await batch('x');
      await fresh.query('ROLLBACK');
    } finally {
      await fresh.end();
    }
    assert.ok(
      seen.some((n) => /idempotency_keys/.test(n)),
      'auto_explain showed the key statements',
    );
    assert.deepEqual(wholeIndexScans(seen), []);
  });

  it('claims a batch of keys, applies it and stores its responses with key probes only', async () => {
    notices.length = 0;
    const keys = ['new-1', 'new-2', 'old-7'];
    await c.query('BEGIN');
    const { rows } = await c.query<{ r: unknown[] }>('SELECT ledger_apply_keyed($1::jsonb, $2::jsonb) AS r', [
      JSON.stringify(keys.map(keyOf)),
      JSON.stringify(keys.map(post)),
    ]);
    // The two new keys are claimed and applied; the taken one is not run (null: replayed).
    assert.equal((rows[0]?.r[0] as { ok?: boolean }).ok, true);
    assert.equal((rows[0]?.r[1] as { ok?: boolean }).ok, true);
    assert.equal(rows[0]?.r[2], null);
    await c.query('SELECT idempotency_complete($1::jsonb)', [
      JSON.stringify(
        ['new-1', 'new-2'].map((key) => ({
          tenant,
          key,
          principal,
          status: 201,
          body: `{"k":"${key}"}`,
          sealed: null,
        })),
      ),
    ]);
    await c.query('COMMIT');
    assert.ok(
      notices.some((n) => /idempotency_keys/.test(n)),
      'auto_explain showed the key statements',
    );
    assert.equal(scansKeys(), false, notices.filter((n) => /idempotency_keys/.test(n)).join('\n'));
    assert.deepEqual(wholeIndexScans(), []);
    const stored = await c.query<{ key: string; response_status: number; response_body: string }>(
      `SELECT key, response_status, response_body FROM idempotency_keys WHERE tenant_id = $1 AND key = ANY($2) ORDER BY key`,
      [tenant, ['new-1', 'new-2']],
    );
    assert.deepEqual(stored.rows, [
      { key: 'new-1', response_status: 201, response_body: '{"k":"new-1"}' },
      { key: 'new-2', response_status: 201, response_body: '{"k":"new-2"}' },
    ]);
  });
});
