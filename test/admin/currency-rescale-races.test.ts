/**
 * A change of a currency's minor units and a write of an amount configured in that currency (a
 * savings product's min_balance, an API key's daily budget, an agent's limits) never pass their
 * checks beside each other: the change holds the currency's row FOR UPDATE from its check to its
 * commit, and each writer reads the row FOR SHARE (migration 1104's guards; the agent route), so
 * one waits for the other and then sees what it did. Each interleaving is made here, not hoped
 * for: the first party's transaction is held open on a connection of the test until the second
 * is seen waiting on it (pg_blocking_pids), then committed. A currency the table lacks has no row
 * to share: its addition and the writers that read ISO 4217's minor units for it meet on a lock of
 * its code instead (core/admin/reference/currencies.ts lockCurrencyCode).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { clientToken } from '../helpers/core-client.ts';
import type { Res } from '../helpers/http.ts';
import { sleep } from '../helpers/listening.ts';
import { freshlyKeyed, startAdmin, type AdminHarness } from './harness.ts';

/** A liveness bound only: the waits below end as soon as what they wait for is seen. */
const seenWithinMs = 10_000;

/** A transaction of the test, open until `commit`. */
interface Held {
  pid: number;
  commit(): Promise<void>;
}

describe('a re-scale and a write of an amount in the currency are serialised', () => {
  let h: AdminHarness;
  let token = '';
  const held: pg.PoolClient[] = [];
  const { admin, ledger } = freshlyKeyed(
    () => h,
    () => token,
    'race',
  );
  const addCurrency = async (code: string, minor: number) => {
    const r = await admin('POST', '/v1/currencies', { code, minor_units: minor });
    assert.equal(r.status, 201, r.text);
  };

  /** Run `sql` in a transaction left open (its locks held) until `commit`. */
  async function holding(sql: string, values: unknown[]): Promise<Held> {
    const c = await h.tdb.db.pool.connect();
    held.push(c);
    await c.query('BEGIN');
    await c.query(sql, values);
    const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    return { pid, commit: async () => void (await c.query('COMMIT')) };
  }
  /** A re-scale of `code` that passed its checks and has not committed yet. */
  const rescaling = (code: string, minor: number) =>
    holding('UPDATE admin_currencies SET minor_units = $2, version = version + 1 WHERE code = $1', [
      code,
      minor,
    ]);

  /** Whether `pending` came to wait on a lock `pid` holds (true) or answered without waiting (false). */
  async function waitsOn(pid: number, pending: Promise<Res>): Promise<boolean> {
    let answered = false;
    void pending.finally(() => {
      answered = true;
    });
    for (const end = Date.now() + seenWithinMs; Date.now() < end; await sleep(10)) {
      const { rows } = await h.tdb.db.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))',
        [pid],
      );
      if ((rows[0]?.n ?? 0) > 0) return true;
      if (answered) return false;
    }
    throw new Error('neither waiting nor answered');
  }

  before(async () => {
    h = await startAdmin();
    token = await clientToken(h.tdb.db, h.origin, 'demo', ['core:read', 'core:write']);
  });
  after(async () => {
    for (const c of held.splice(0)) {
      await c.query('ROLLBACK').catch(() => undefined);
      c.release();
    }
    await h?.close();
  });

  it('a savings product written during a re-scale waits for it and is refused with the new minor units', async () => {
    await addCurrency('TTD', 2);
    const rescale = await rescaling('TTD', 0);
    const product = ledger('/v1/core/savings-products', {
      code: 'SAVE_TTD',
      name: 'TTD saver',
      currency: 'TTD',
      interest_rate_bps: 100,
      min_balance: '10.50',
    });
    assert.ok(await waitsOn(rescale.pid, product), 'the product write waits for the re-scale');
    await rescale.commit();
    const r = await product;
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.code, 'INVALID_AMOUNT');
    assert.match(r.json.message, /min_balance: 10\.5 has more decimals than the 0 minor units of TTD/);
    const { rows } = await h.tdb.db.query(`SELECT 1 FROM ledger_savings_products WHERE currency = 'TTD'`);
    assert.equal(rows.length, 0, 'nothing stored');
  });

  it('a re-scale during a savings product write waits for it and is refused naming the product', async () => {
    await addCurrency('BBD', 2);
    const write = await holding(
      `INSERT INTO ledger_savings_products (tenant_id, code, name, currency, interest_rate_bps, min_balance)
       VALUES ('demo', 'SAVE_BBD', 'BBD saver', 'BBD', 100, 10.50)`,
      [],
    );
    const rescale = admin('PATCH', '/v1/currencies/BBD', { minor_units: 0 }, { 'if-match': '*' });
    assert.ok(await waitsOn(write.pid, rescale), 'the re-scale waits for the product write');
    await write.commit();
    const r = await rescale;
    assert.equal(r.status, 409, r.text);
    assert.equal(r.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    assert.match(r.json.detail, /savings product SAVE_BBD of tenant demo/);
    assert.equal((await admin('GET', '/v1/currencies/BBD')).json.minor_units, 2);
  });

  it("an API key's budget written during a re-scale waits for it and is refused with the new minor units", async () => {
    await addCurrency('JMD', 2);
    const rescale = await rescaling('JMD', 0);
    const key = admin('POST', '/api-keys', {
      name: 'jmd-budget',
      scopes: ['core:write'],
      budget: { daily_amount: '5.50', currency: 'JMD' },
    });
    assert.ok(await waitsOn(rescale.pid, key), 'the key write waits for the re-scale');
    await rescale.commit();
    const r = await key;
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.code, 'INVALID_AMOUNT');
    assert.doesNotMatch(r.text, /sk_live_|pk_live_/, 'no key named');
  });

  /**
   * A route's transaction paused inside `table`'s `op` trigger (after the route's checks, before
   * its change) while the test holds advisory lock `key`; `release` lets every paused one go on.
   */
  async function pauseIn(table: string, op: 'INSERT' | 'UPDATE', key: number) {
    await h.tdb.db.query(`
      CREATE FUNCTION test_pause_${key}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_advisory_xact_lock(${key}); RETURN NEW; END $$;
      CREATE TRIGGER test_pause_${key} BEFORE ${op} ON ${table} FOR EACH ROW EXECUTE FUNCTION test_pause_${key}();`);
    const c = await h.tdb.db.pool.connect();
    held.push(c);
    await c.query('SELECT pg_advisory_lock($1)', [key]);
    const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    return {
      pid,
      /** The backend of the route paused on it, once it is. */
      async paused(pending: Promise<Res>): Promise<number> {
        assert.ok(await waitsOn(pid, pending), `the route pauses in the ${table} trigger`);
        const { rows } = await h.tdb.db.query<{ pid: number }>(
          'SELECT pid FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))',
          [pid],
        );
        return rows[0]?.pid ?? 0;
      },
      async release() {
        await c.query('SELECT pg_advisory_unlock_all()');
        await h.tdb.db.query(`DROP TRIGGER test_pause_${key} ON ${table}; DROP FUNCTION test_pause_${key}()`);
      },
    };
  }
  /** An inactive TRANSFER fee schedule in `currency` whose fixed fee has three decimals, and its activation. */
  async function feeSchedule(currency: string): Promise<() => Promise<Res>> {
    const fee = await admin('POST', '/v1/schedules', { kind: 'FEE', product: 'TRANSFER', currency });
    assert.equal(fee.status, 201, fee.text);
    const items = [{ min_amount: '0', fixed: '0.125', percent_bps: 100 }];
    const added = await admin('POST', `/v1/schedules/${fee.json.id}/fees`, { items });
    assert.equal(added.status, 200, added.text);
    const etag = (await admin('GET', `/v1/schedules/${fee.json.id}`)).headers.etag ?? '';
    return () => admin('PATCH', `/v1/schedules/${fee.json.id}`, { status: 'ACTIVE' }, { 'if-match': etag });
  }

  it("a currency added with fewer minor units than ISO 4217's while a schedule in it is activated waits for it and is refused", async () => {
    // LYD is not in the table: the schedule is validated against ISO 4217's 3 minor units.
    const activate = await feeSchedule('LYD');
    const pause = await pauseIn('admin_schedules', 'UPDATE', 7101);
    const activation = activate();
    let added: Promise<Res> | undefined;
    try {
      const activating = await pause.paused(activation);
      added = admin('POST', '/v1/currencies', { code: 'LYD', minor_units: 2 });
      assert.ok(await waitsOn(activating, added), 'the addition waits for the activation');
    } finally {
      await pause.release();
    }
    const [a, r] = await Promise.all([activation, added]);
    assert.equal(a.status, 200, a.text);
    assert.equal(r.status, 409, r.text);
    assert.equal(r.json.code, 'CURRENCY_MINOR_UNITS_LOCKED');
    const { rows } = await h.tdb.db.query(`SELECT 1 FROM admin_currencies WHERE code = 'LYD'`);
    assert.equal(rows.length, 0, 'not added');
  });

  it("a schedule activated while its currency is added with fewer minor units than ISO 4217's waits for it and is refused", async () => {
    const activate = await feeSchedule('IQD');
    const pause = await pauseIn('admin_currencies', 'INSERT', 7102);
    const added = admin('POST', '/v1/currencies', { code: 'IQD', minor_units: 2 });
    let activation: Promise<Res> | undefined;
    try {
      const adding = await pause.paused(added);
      activation = activate();
      assert.ok(await waitsOn(adding, activation), 'the activation waits for the addition');
    } finally {
      await pause.release();
    }
    const [r, a] = await Promise.all([added, activation]);
    assert.equal(r.status, 201, r.text);
    assert.equal(a.status, 400, a.text);
    assert.equal(a.json.code, 'SCHEDULE_PRECISION');
  });

  it("an agent created during a re-scale of its tenant's currency waits for it and is refused with the new minor units", async () => {
    await addCurrency('XCD', 2);
    await h.tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('agx', 'Agx', 'KE', 'XCD')`,
    );
    const outlet = await h.as('admin', 'agx')('POST', '/v1/outlets', {
      json: { name: 'Shop', region: 'Coast' },
      headers: { 'idempotency-key': `race-${randomUUID()}` },
    });
    assert.equal(outlet.status, 201, outlet.text);
    const rescale = await rescaling('XCD', 0);
    const agent = h.as('admin', 'agx')('POST', '/v1/agents', {
      json: {
        code: 'AGX001',
        phone: '+254711900001',
        name: 'Agent X',
        outletId: outlet.json.id,
        txn_max_amount: '10.50',
      },
      headers: { 'idempotency-key': `race-${randomUUID()}` },
    });
    assert.ok(await waitsOn(rescale.pid, agent), 'the agent creation waits for the re-scale');
    await rescale.commit();
    const r = await agent;
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.code, 'INVALID_AMOUNT');
    const { rows } = await h.tdb.db.query(`SELECT 1 FROM agents WHERE tenant_id = 'agx'`);
    assert.equal(rows.length, 0, 'no agent stored');
  });
});
