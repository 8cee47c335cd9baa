/**
 * The set-based posting path (ledger_post_batch, used by ledger_apply for batches made only of
 * postings) against the command-by-command path (ledger_apply_each, which runs each post as a
 * batch of one: the running sums and repeated passes of a whole batch against one command at a
 * time, each seeing the ones before it committed to its transaction): random batches with
 * chains of debits on the same accounts, insufficient funds in the middle of a chain, unknown,
 * closed and other-currency accounts and unknown transaction types must give the same results,
 * messages and balances. Also the database backstops of the set-based entries trigger.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { ledgerTenant } from './tenant-db.ts';

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('ledger set-based posting batch', () => {
  let t: TestDb;
  const tenant = 'batch-t';
  const kes: string[] = [];
  let usd = '';
  let closed = '';
  let settlement = '';
  before(async () => {
    t = await freshDatabase();
    const db = t.db;
    const open = await ledgerTenant(db, tenant);
    settlement = await open('SETTLEMENT');
    for (let i = 0; i < 8; i++) kes.push(await open('WALLET_MAIN'));
    usd = await open('WALLET_MAIN', 'USD');
    closed = await open('WALLET_MAIN');
    await db.query(`UPDATE ledger_accounts SET status = 'closed' WHERE tenant_id = $1 AND id = $2`, [
      tenant,
      closed,
    ]);
    // Small balances, so chains of debits run out of funds part way through a batch.
    await db.query('SELECT ledger_apply($1::jsonb)', [
      JSON.stringify(
        kes.map((a, i) =>
          post([
            [settlement, 'debit', `${10 + i}.000000`],
            [a, 'credit', `${10 + i}.000000`],
          ]),
        ),
      ),
    ]);
  });
  after(() => t.drop());

  function post(
    legs: [string, 'debit' | 'credit', string, string?][],
    type = 'TRANSFER',
  ): Record<string, unknown> {
    return {
      op: 'post',
      tenant,
      id: randomUUID(),
      transaction_id: randomUUID(),
      type,
      currency: 'KES',
      description: null,
      metadata: {},
      entries: legs.map(([account_id, side, amount, currency]) => ({
        account_id,
        side,
        amount,
        currency: currency ?? 'KES',
      })),
    };
  }

  async function run(fn: 'ledger_post_batch' | 'ledger_apply_each', cmds: unknown[]) {
    const c = new pg.Client({ connectionString: t.url });
    await c.connect();
    try {
      await c.query('BEGIN');
      const r = (
        await c.query<{ r: Record<string, unknown>[] }>(`SELECT ${fn}($1::jsonb) AS r`, [
          JSON.stringify(cmds),
        ])
      ).rows[0]!.r;
      const balances = (
        await c.query(
          `SELECT account_id, debits_posted::text, credits_posted::text FROM ledger_balances WHERE tenant_id = $1 ORDER BY account_id`,
          [tenant],
        )
      ).rows;
      const counts = (
        await c.query(`SELECT (SELECT count(*) FROM ledger_entries)::int AS e, (SELECT count(*) FROM ledger_postings)::int AS p,
        (SELECT count(*) FROM ledger_transactions)::int AS t, (SELECT count(*) FROM ledger_transaction_history)::int AS h, (SELECT count(*) FROM outbox)::int AS o`)
      ).rows[0];
      const events = (
        await c.query(
          `SELECT aggregate_id, payload FROM outbox WHERE event = 'posting.created' ORDER BY id DESC LIMIT $1`,
          [cmds.length],
        )
      ).rows.reverse();
      await c.query('ROLLBACK');
      return { results: r.map((x) => (x.ok ? { ok: true } : x)), balances, counts, events };
    } finally {
      await c.end();
    }
  }

  it('gives the same results, messages, rows and balances as the command-by-command path', async () => {
    const seed = Number(process.env.LEDGER_SEED ?? Date.now() % 100_000);
    const rand = rng(seed);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)] as T;
    let failures = 0;
    for (let round = 0; round < 40; round++) {
      const cmds = Array.from({ length: 1 + Math.floor(rand() * 40) }, () => {
        const x = rand();
        const amount = `${1 + Math.floor(rand() * 6)}.${String(Math.floor(rand() * 100)).padStart(2, '0')}0000`;
        const from = x < 0.03 ? randomUUID() : x < 0.06 ? closed : pick(kes);
        const to = x > 0.97 ? usd : x > 0.94 ? pick([settlement, ...kes]) : pick(kes);
        if (rand() < 0.15) {
          // Three legs: one debit split over two credits (one may be the debited account).
          const half = `${Number(amount.split('.')[0]) * 2}.000000`;
          return post([
            [from, 'debit', half],
            [to, 'credit', amount.replace(/\..*/, '.000000')],
            [pick([from, ...kes]), 'credit', amount.replace(/\..*/, '.000000')],
          ]);
        }
        return post(
          [
            [from, 'debit', amount],
            [to, 'credit', amount],
          ],
          rand() < 0.03 ? 'NO_SUCH_TYPE' : 'TRANSFER',
        );
      });
      const a = await run('ledger_post_batch', cmds);
      const b = await run('ledger_apply_each', cmds);
      assert.deepEqual(a.results, b.results, `results, round ${round} (seed ${seed})`);
      assert.deepEqual(a.balances, b.balances, `balances, round ${round} (seed ${seed})`);
      assert.deepEqual(a.counts, b.counts, `rows, round ${round} (seed ${seed})`);
      assert.deepEqual(a.events, b.events, `events, round ${round} (seed ${seed})`);
      failures += a.results.filter((r) => !r.ok).length;
    }
    assert.ok(failures > 10, `enough refusals to mean something: ${failures}`);
  });

  it('ledger_apply answers every command of a postings batch, in order', async () => {
    const cmds = [
      post([
        [kes[0]!, 'debit', '1.000000'],
        [kes[1]!, 'credit', '1.000000'],
      ]),
      post([
        [kes[0]!, 'debit', '100000.000000'],
        [kes[1]!, 'credit', '100000.000000'],
      ]),
      post([
        [kes[1]!, 'debit', '1.000000'],
        [kes[0]!, 'credit', '1.000000'],
      ]),
    ];
    const { rows } = await t.db.query<{ r: { ok: boolean; code?: string }[] }>(
      'SELECT ledger_apply($1::jsonb) AS r',
      [JSON.stringify(cmds)],
    );
    assert.deepEqual(
      rows[0]!.r.map((r) => r.ok || r.code),
      [true, 'INSUFFICIENT_FUNDS', true],
    );
    assert.deepEqual((await t.db.query('SELECT ledger_apply($1::jsonb) AS r', ['[]'])).rows[0]?.r, []);
  });

  it("ledger_apply's first checks for a whole batch at once: amounts finer than the table's minor units (legs, a new hold, a partial capture in its hold's currency) before a fraud hold, each command answered in place", async () => {
    const hold = (debit: string, amount: string) => ({
      op: 'hold',
      tenant,
      id: randomUUID(),
      transaction_id: randomUUID(),
      type: 'TRANSFER',
      debit_account_id: debit,
      credit_account_id: settlement,
      currency: 'KES',
      amount,
      description: 'held',
      metadata: {},
      expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const capture = (holdId: string, amount: string) => ({
      op: 'capture',
      tenant,
      hold_id: holdId,
      amount,
      id: randomUUID(),
      now: new Date().toISOString(),
    });
    const open = hold(kes[6]!, '1.00');
    const opened = await t.db.query<{ r: { ok: boolean }[] }>('SELECT ledger_apply($1::jsonb) AS r', [
      JSON.stringify([open]),
    ]);
    assert.equal(opened.rows[0]!.r[0]!.ok, true);
    const frozen = kes[5]!;
    await t.db.query(
      `INSERT INTO wallet_fraud_holds (tenant_id, id, account_id, reason, placed_by, placed_at)
       VALUES ($1, $2, $3, 'batch check', 'staff-1', now())`,
      [tenant, randomUUID(), frozen],
    );
    const fine = (from: string) =>
      post([
        [from, 'debit', '0.010000'],
        [settlement, 'credit', '0.010000'],
      ]);
    const cmds = [
      fine(kes[0]!),
      post([
        [kes[1]!, 'debit', '0.001000'],
        [settlement, 'credit', '0.001000'],
      ]),
      fine(frozen),
      post([
        [frozen, 'debit', '0.005000'],
        [settlement, 'credit', '0.005000'],
      ]),
      hold(kes[2]!, '0.015'),
      hold(frozen, '0.01'),
      capture(open.id, '0.001'),
      post([
        [settlement, 'debit', '0.010000'],
        [frozen, 'credit', '0.010000'],
      ]),
      fine(kes[3]!),
    ];
    const { rows } = await t.db.query<{ r: { ok: boolean; code?: string }[] }>(
      'SELECT ledger_apply($1::jsonb) AS r',
      [JSON.stringify(cmds)],
    );
    assert.deepEqual(
      rows[0]!.r.map((r) => r.ok || r.code),
      [
        true,
        'INVALID_AMOUNT',
        'ACCOUNT_FROZEN',
        'INVALID_AMOUNT',
        'INVALID_AMOUNT',
        'ACCOUNT_FROZEN',
        'INVALID_AMOUNT',
        true,
        true,
      ],
    );
    const { rows: held } = await t.db.query<{ n: string }>(
      `SELECT count(*) AS n FROM ledger_holds WHERE tenant_id = $1 AND id = ANY($2::uuid[])`,
      [tenant, [cmds[4]!.id, cmds[5]!.id]],
    );
    assert.equal(held[0]!.n, '0', 'refused holds leave no row');
  });

  it('the entries trigger refuses, for a whole multi-posting statement: a posting short of a leg, an unbalanced one, a foreign currency, a balance below its line', async () => {
    const header = async (c: pg.ClientBase, id: string, n: number) =>
      c.query(
        `INSERT INTO ledger_postings (tenant_id, id, transaction_id, type_code, kind, currency, entry_count) VALUES ($1, $2, $3, 'TRANSFER', 'posting', 'KES', $4)`,
        [tenant, id, randomUUID(), n],
      );
    const attempt = async (
      legs: [number, string, 'debit' | 'credit', string, string][],
      counts: [number, number],
      re: RegExp,
    ) => {
      const c = await t.db.pool.connect();
      try {
        await c.query('BEGIN');
        const ids = [randomUUID(), randomUUID()];
        await header(c, ids[0]!, counts[0]);
        await header(c, ids[1]!, counts[1]);
        const rows = legs.map(
          ([p, account, side, amount, currency], i) =>
            `('${tenant}', '${ids[p]}', ${legs.slice(0, i).filter((l) => l[0] === p).length + 1}, '${account}', '${side}', ${amount}, '${currency}')`,
        );
        await assert.rejects(
          c.query(
            `INSERT INTO ledger_entries (tenant_id, posting_id, leg, account_id, side, amount, currency) VALUES ${rows.join(', ')}`,
          ),
          re,
        );
      } finally {
        await c.query('ROLLBACK');
        c.release();
      }
    };
    const [a, b] = [kes[2]!, kes[3]!];
    await attempt(
      [
        [0, a, 'debit', '1', 'KES'],
        [0, b, 'credit', '1', 'KES'],
        [1, a, 'debit', '1', 'KES'],
      ],
      [2, 2],
      /all its legs/,
    );
    await attempt(
      [
        [0, a, 'debit', '1', 'KES'],
        [0, b, 'credit', '1', 'KES'],
        [1, a, 'debit', '1', 'KES'],
        [1, b, 'credit', '2', 'KES'],
      ],
      [2, 2],
      /does not balance/,
    );
    await attempt(
      [
        [0, a, 'debit', '1', 'KES'],
        [0, b, 'credit', '1', 'KES'],
        [1, a, 'debit', '1', 'USD'],
        [1, b, 'credit', '1', 'USD'],
      ],
      [2, 2],
      /currency/,
    );
    await attempt(
      [
        [0, a, 'debit', '1', 'KES'],
        [0, b, 'credit', '1', 'KES'],
        [1, a, 'debit', '1000', 'KES'],
        [1, b, 'credit', '1000', 'KES'],
      ],
      [2, 2],
      /ledger_balances_not_below_line/,
    );
    // References (0106: the trigger, not foreign keys): an unknown account, another tenant's
    // account, a posting that was never written.
    await attempt(
      [
        [0, a, 'debit', '1', 'KES'],
        [0, randomUUID(), 'credit', '1', 'KES'],
        [1, a, 'debit', '1', 'KES'],
        [1, b, 'credit', '1', 'KES'],
      ],
      [2, 2],
      /currency is not its account/,
    );
    const foreign = `f-${randomUUID().slice(0, 8)}`;
    const theirs = await (await ledgerTenant(t.db, foreign))('WALLET_MAIN');
    await attempt(
      [
        [0, a, 'debit', '1', 'KES'],
        [0, theirs, 'credit', '1', 'KES'],
        [1, a, 'debit', '1', 'KES'],
        [1, b, 'credit', '1', 'KES'],
      ],
      [2, 2],
      /currency is not its account/,
    );
    await assert.rejects(
      t.db.query(
        `INSERT INTO ledger_entries (tenant_id, posting_id, leg, account_id, side, amount, currency) VALUES ($1, $2, 1, $3, 'debit', 1, 'KES'), ($1, $2, 2, $4, 'credit', 1, 'KES')`,
        [tenant, randomUUID(), a, b],
      ),
      /did not arrive with all its legs/,
    );
    // ... and what the entries reference cannot go away.
    await assert.rejects(
      t.db.query('DELETE FROM ledger_accounts WHERE tenant_id = $1 AND id = $2', [tenant, a]),
      /append-only/,
    );
    await assert.rejects(t.db.query('TRUNCATE ledger_balances, ledger_accounts CASCADE'), /append-only/);
    await assert.rejects(
      t.db.query('UPDATE ledger_accounts SET id = $3 WHERE tenant_id = $1 AND id = $2', [
        tenant,
        a,
        randomUUID(),
      ]),
      /never change/,
    );
    await assert.rejects(
      t.db.query('DELETE FROM ledger_postings WHERE tenant_id = $1', [tenant]),
      /append-only/,
    );
  });

  it("ledger_apply_keyed claims keys per (tenant, key, principal): a key taken before or repeated in the batch is not run (null), the first occurrence keeps its own hash; another principal's key of the same value runs; a legacy record is never claimed", async () => {
    const key = (k: string, hash: string, principal = 'client:cc_one') => ({
      tenant,
      key: k,
      principal,
      method: 'POST',
      path: '/v1/core/postings',
      hash,
    });
    await t.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash, response_status, response_body) VALUES ($1, 'taken-key-1', 'client:cc_one', 'POST', '/v1/core/postings', 'h0', 201, '{}')`,
      [tenant],
    );
    await t.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash, response_status, response_body) VALUES ($1, 'legacy-key-1', 'legacy', 'POST', '/v1/core/postings', 'h0', 201, '{}')`,
      [tenant],
    );
    const cmds = [0, 1, 2, 3, 4, 5].map(() =>
      post([
        [kes[4]!, 'debit', '0.010000'],
        [kes[5]!, 'credit', '0.010000'],
      ]),
    );
    const keys = [
      key('dup-key-01', 'first'),
      key('taken-key-1', 'h1'),
      key('dup-key-01', 'second'),
      null,
      key('taken-key-1', 'h1', 'client:pk_live_other'),
      key('legacy-key-1', 'h0'),
    ];
    const before = (await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM ledger_postings'))
      .rows[0]!.n;
    const { rows } = await t.db.query<{ r: ({ ok: boolean } | null)[] }>(
      'SELECT ledger_apply_keyed($1::jsonb, $2::jsonb) AS r',
      [JSON.stringify(keys), JSON.stringify(cmds)],
    );
    assert.deepEqual(
      rows[0]!.r.map((r) => (r === null ? null : r.ok)),
      [true, null, null, true, true, null],
    );
    assert.equal(
      (await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM ledger_postings')).rows[0]!.n,
      before + 3,
    );
    const stored = await t.db.query<{ request_hash: string }>(
      `SELECT request_hash FROM idempotency_keys WHERE tenant_id = $1 AND key = 'dup-key-01'`,
      [tenant],
    );
    assert.equal(stored.rows[0]?.request_hash, 'first');
    const owners = await t.db.query<{ principal: string }>(
      `SELECT principal FROM idempotency_keys WHERE tenant_id = $1 AND key = 'taken-key-1' ORDER BY principal`,
      [tenant],
    );
    assert.deepEqual(
      owners.rows.map((r) => r.principal),
      ['client:cc_one', 'client:pk_live_other'],
    );
    await assert.rejects(
      t.db.query('SELECT ledger_apply_keyed($1::jsonb, $2::jsonb)', [
        JSON.stringify([{ tenant, key: 'no-principal-1', method: 'POST', path: '/', hash: 'h' }]),
        JSON.stringify([cmds[0]]),
      ]),
      /without its principal/,
    );
  });

  it('ledger_apply_keyed: a second batch with a key in flight waits for the first, then does not run it', async () => {
    const k = {
      tenant,
      key: 'inflight-key-1',
      principal: 'client:cc_one',
      method: 'POST',
      path: '/v1/core/postings',
      hash: 'h',
    };
    const cmd = () =>
      post([
        [kes[6]!, 'debit', '0.010000'],
        [kes[7]!, 'credit', '0.010000'],
      ]);
    const a = new pg.Client({ connectionString: t.url });
    const b = new pg.Client({ connectionString: t.url });
    await a.connect();
    await b.connect();
    try {
      await a.query('BEGIN');
      const first = await a.query<{ r: unknown[] }>('SELECT ledger_apply_keyed($1::jsonb, $2::jsonb) AS r', [
        JSON.stringify([k]),
        JSON.stringify([cmd()]),
      ]);
      assert.equal((first.rows[0]!.r[0] as { ok: boolean }).ok, true);
      let settled = false;
      const second = b
        .query<{ r: unknown[] }>('SELECT ledger_apply_keyed($1::jsonb, $2::jsonb) AS r', [
          JSON.stringify([k]),
          JSON.stringify([cmd()]),
        ])
        .finally(() => {
          settled = true;
        });
      // Poll (not a timed wait) until b's backend is blocked by a's transaction.
      const aPid = (await a.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      const blocked = async () =>
        (
          await t.db.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))',
            [aPid],
          )
        ).rows[0]?.n ?? 0;
      for (let i = 0; i < 1000 && !settled && (await blocked()) === 0; i++)
        await new Promise((r) => setTimeout(r, 5));
      assert.equal(settled, false, 'the second waits on the key');
      assert.equal(await blocked(), 1, "blocked by the first batch's transaction");
      await a.query(
        `UPDATE idempotency_keys SET response_status = 201, response_body = '{}' WHERE tenant_id = $1 AND key = $2`,
        [tenant, k.key],
      );
      await a.query('COMMIT');
      assert.deepEqual((await second).rows[0]!.r, [null]);
    } finally {
      await a.end();
      await b.end();
    }
  });
});
