/**
 * Issue 23 item 6: background sweeps that every core instance runs (hold expiry, housekeeping)
 * touch each row once, whether they exclude each other (runExclusive) or race.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { runExclusive } from '../../core/db/exclusive.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { pruneOnce } from '../../core/housekeeping/prune.ts';
import { Ledger } from '../../core/ledger/service.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { LedgerFixture, type Tenant } from '../ledger/fixture.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { call } from '../helpers/http.ts';

const holdCount = 40;

describe('sweeps with two core instances', () => {
  let f: LedgerFixture;
  let t: Tenant;
  let payer: string;
  let payee: string;
  const pools: Db[] = [];
  const ledgers: Ledger[] = [];
  before(async () => {
    f = await LedgerFixture.start();
    t = await f.tenant();
    payer = await f.account(t);
    payee = await f.account(t);
    await f.fund(t, payer, '1000.00');
    for (let i = 0; i < 2; i++) {
      const db = createDb({
        connectionString: f.t.tdb.url,
        metrics: createMetrics(),
        log: createLogger('silent'),
      });
      pools.push(db);
      // An hour ahead: these sweepers see the holds expired; the fixture core's own (real clock) does not.
      ledgers.push(new Ledger({ db, log: createLogger('silent'), now: () => Date.now() + 3_600_000 }));
    }
  });
  after(async () => {
    for (const p of pools) await p.close();
    await f.close();
  });

  const holds = async (): Promise<string[]> =>
    Promise.all(
      Array.from({ length: holdCount }, async () => {
        const r = await f.req(t.write, 'POST', '/v1/core/holds', {
          debit_account_id: payer,
          credit_account_id: payee,
          currency: 'KES',
          amount: '1.50',
          expires_in_s: 600,
        });
        assert.equal(r.status, 201, r.text);
        return r.json.id as string;
      }),
    );
  const pending = async (ids: string[]) =>
    Number(
      (
        await f.db.query<{ n: string }>(
          `SELECT count(*) AS n FROM ledger_holds WHERE id = ANY($1::uuid[]) AND status = 'pending'`,
          [ids],
        )
      ).rows[0]?.n,
    );
  /** The holds among `ids` with a hold.expire record, one entry per record, sorted. */
  const expiryRecords = async (ids: string[]): Promise<string[]> => {
    const { rows } = await f.db.query<{ id: string }>(
      `SELECT target->>'id' AS id FROM audit_log
        WHERE tenant_id = $1 AND action = 'hold.expire' AND target->>'type' = 'hold' AND target->>'id' = ANY($2::text[])
          AND actor = '{"type":"system","id":"hold-sweeper"}'::jsonb AND attrs->>'outcome' = 'ok'`,
      [t.id, ids],
    );
    return rows.map((r) => r.id).sort();
  };
  const assertExpiredOnce = async (ids: string[]) => {
    const { rows } = await f.db.query<{ status: string; events: string }>(
      `SELECT h.status, (SELECT count(*) FROM outbox o WHERE o.aggregate = 'hold' AND o.aggregate_id = h.id::text AND o.event = 'hold.expired') AS events
         FROM ledger_holds h WHERE h.id = ANY($1::uuid[])`,
      [ids],
    );
    assert.deepEqual(
      rows.filter((r) => r.status !== 'expired' || r.events !== '1'),
      [],
      'every hold expired, one hold.expired event each',
    );
    const b = await f.balances(t, payer);
    assert.equal(b.pending_debits, '0.00', 'every reservation released once (G3)');
    assert.equal(b.available, '1000.00');
  };

  it('two instances sweeping at once expire each hold once, one instance at a time', async () => {
    const ids = await holds();
    let expired = 0;
    for (let round = 0; round < 50 && (await pending(ids)) > 0; round++) {
      for (const n of await Promise.all(ledgers.map((l) => l.sweepOnce()))) expired += n ?? 0;
    }
    assert.equal(expired, holdCount, 'the sweepers together count each hold once');
    await assertExpiredOnce(ids);
    assert.deepEqual(await expiryRecords(ids), [...ids].sort(), 'one expiry record per hold');
  });

  it('without the exclusion, racing sweepers still expire each hold once (the ledger locks the hold and re-reads its status)', async () => {
    const ids = await holds();
    const counts = await Promise.all(ledgers.map((l) => l.sweepExpiredHolds()));
    assert.equal(
      counts.reduce((a, b) => a + b, 0),
      holdCount,
      `${counts.join(' + ')}`,
    );
    assert.equal(await pending(ids), 0);
    await assertExpiredOnce(ids);
    assert.deepEqual(
      await expiryRecords(ids),
      [...ids].sort(),
      'one record per hold, by the sweeper that expired it, none by the one that found it taken',
    );
  });

  it("a sweep's records are one per hold, found by GET /v1/audit?resource=hold, all in its one transaction round trip", async () => {
    const ids = await holds();
    const steps: string[] = [];
    const timed = new Ledger({
      db: pools[0] as Db,
      log: createLogger('silent'),
      now: () => Date.now() + 3_600_000,
      stepTimer: (step, _pid, run) => {
        steps.push(step);
        return run();
      },
    });
    assert.equal(await timed.sweepExpiredHolds(), holdCount);
    assert.deepEqual(steps, ['claim+apply', 'audit+responses+commit'], 'one batch: its records in one write');
    const staff = (tenant: string, role: string) =>
      viaEdge({
        'x-request-id': randomUUID(),
        'x-tenant-id': tenant,
        'x-principal-id': `staff-${role}`,
        'x-roles': role,
        'x-client-ip': '10.0.0.1',
      });
    // The second id in upper case: a UUID names the same record whatever its case (RFC 9562).
    for (const id of [ids[0], ids[holdCount - 1]?.toUpperCase()] as string[]) {
      const r = await call(f.origin, 'GET', `/v1/audit?resource=hold&resource_id=${id}`, {
        headers: staff(t.id, 'readonly'),
      });
      assert.equal(r.status, 200, r.text);
      const expiry = (r.json.items as { action: string; actor: unknown; target: unknown }[]).filter(
        (a) => a.action === 'hold.expire',
      );
      assert.deepEqual(
        expiry.map((a) => [a.actor, a.target]),
        [
          [
            { type: 'system', id: 'hold-sweeper' },
            { type: 'hold', id: id.toLowerCase() },
          ],
        ],
        `the expiry of hold ${id}`,
      );
    }
    // Another tenant's staff never see the hold's expiry, and the tenant's chain still verifies
    // with the sweep's records appended in one insert.
    const other = await f.tenant();
    const elsewhere = await call(f.origin, 'GET', `/v1/audit?resource=hold&resource_id=${ids[0]}`, {
      headers: staff(other.id, 'readonly'),
    });
    assert.equal(elsewhere.status, 200, elsewhere.text);
    assert.deepEqual(elsewhere.json.items, [], "another tenant's audit holds no record of the hold");
    const verified = await call(f.origin, 'GET', '/v1/audit:verify', { headers: staff(t.id, 'ops') });
    assert.equal(verified.status, 200, verified.text);
    assert.equal(verified.json.ok, true, verified.text);
  });

  it('holds captured after a sweep listed them and before it applied: captured, never expired nor recorded as expired', async () => {
    const ids = await holds();
    const taken = ids.filter((_, i) => i % 2 === 0);
    const captures: number[] = [];
    const sweeper = new Ledger({
      db: pools[0] as Db,
      log: createLogger('silent'),
      now: () => Date.now() + 3_600_000,
      // The sweep has listed every hold as pending; half are captured before its command runs.
      stepTimer: async (step, _pid, run) => {
        if (step === 'claim+apply' && captures.length === 0)
          for (const id of taken) {
            const c = await f.req(t.write, 'POST', `/v1/core/holds/${id}/capture`, { amount: '1.50' });
            captures.push(c.status);
          }
        return run();
      },
    });
    assert.equal(await sweeper.sweepExpiredHolds(), holdCount - taken.length);
    assert.deepEqual(
      captures,
      taken.map(() => 200),
      'each capture made before the sweep applied',
    );
    const { rows } = await f.db.query<{ id: string; status: string }>(
      `SELECT id::text AS id, status FROM ledger_holds WHERE tenant_id = $1 AND id = ANY($2::uuid[]) ORDER BY id`,
      [t.id, ids],
    );
    const expired = ids.filter((id) => !taken.includes(id)).sort();
    assert.deepEqual(
      rows.filter((r) => r.status === 'expired').map((r) => r.id),
      expired,
      'only the holds nobody captured expired',
    );
    assert.deepEqual(await expiryRecords(ids), expired, 'an expiry record exactly for each expired hold');
    const { rows: all } = await f.db.query<{ n: string }>(
      `SELECT count(*) AS n FROM audit_log WHERE tenant_id = $1 AND action = 'hold.expire' AND target->>'id' = ANY($2::text[])`,
      [t.id, taken],
    );
    assert.equal(Number(all[0]?.n), 0, 'no expiry record of any outcome for a captured hold');
  });

  it('housekeeping runs racing each other delete each inert row once and keep the live ones', async () => {
    await f.db.query(
      `INSERT INTO edge_replay (kind, value, expires_at) SELECT 'dpop', 'old-' || i, now() - interval '1 hour' FROM generate_series(1, 500) i`,
    );
    await f.db.query(
      `INSERT INTO edge_replay (kind, value, expires_at) SELECT 'dpop', 'live-' || i, now() + interval '1 hour' FROM generate_series(1, 20) i`,
    );
    const runs = await Promise.all(pools.map((db) => pruneOnce(db, 7)));
    const left = Number(
      (await f.db.query<{ n: string }>(`SELECT count(*) AS n FROM edge_replay WHERE value LIKE 'old-%'`))
        .rows[0]?.n,
    );
    const counted = runs.reduce((a, r) => a + (r.edge_replay ?? 0), 0);
    assert.equal(counted, 500 - left, 'no row counted by both runs');
    assert.equal(((await pruneOnce(f.db)).edge_replay ?? 0) + counted, 500);
    assert.equal((await f.db.query(`SELECT 1 FROM edge_replay WHERE value LIKE 'live-%'`)).rowCount, 20);
  });

  it('runExclusive: one instance runs a job at a time; the lock is free again after the job, even one that failed', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let started!: () => void;
    const running = new Promise<void>((r) => {
      started = r;
    });
    const first = runExclusive(pools[0] as Db, 'housekeeping', async () => {
      started();
      await held;
      return 'first';
    });
    await running;
    let ran = false;
    assert.equal(
      await runExclusive(pools[1] as Db, 'housekeeping', async () => {
        ran = true;
        return 'second';
      }),
      undefined,
    );
    assert.equal(ran, false, 'skipped while the other instance runs it');
    // Not holdExpiry: the fixture core's own sweeper takes that one every second.
    assert.equal(
      await runExclusive(pools[1] as Db, 'outboxRouting', async () => 'other job'),
      'other job',
      'jobs have their own locks',
    );
    release();
    assert.equal(await first, 'first');
    await assert.rejects(
      runExclusive(pools[1] as Db, 'housekeeping', async () => {
        throw new Error('job failed');
      }),
      /job failed/,
    );
    assert.equal(await runExclusive(pools[0] as Db, 'housekeeping', async () => 'again'), 'again');
  });
});
