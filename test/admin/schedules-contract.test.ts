import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { limitRowsFor, quoteFee } from '../../core/admin/schedules.ts';
import { feeForTier, validateLimits, validateTiers, units } from '../../core/admin/schedules/tiers.ts';
import { parseTiers } from '../../core/admin/schedules/write.ts';
import { AppError } from '../../shared/errors.ts';
import { parseAmount } from '../../shared/money.ts';
import { seedDemo } from '../../core/seed.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const kes = (s: string): bigint => {
  const r = parseAmount(s, { allowZero: true });
  assert.ok(r.ok);
  return r.micro;
};

describe('fee arithmetic and schedule validation (pure)', () => {
  it('rounds the percentage half-up to minor units and clamps to min/max', () => {
    const t = {
      minAmount: 0n,
      maxAmount: null,
      fixed: 0n,
      percentBps: 100,
      feeMin: kes('15'),
      feeMax: kes('300'),
    };
    assert.equal(feeForTier(t, kes('2345.67'), 2), kes('23.46'));
    assert.equal(feeForTier(t, kes('2345.50'), 2), kes('23.46')); // 23.455 → 23.46 (half-up)
    assert.equal(feeForTier(t, kes('1000'), 2), kes('15'));
    assert.equal(feeForTier(t, kes('40000'), 2), kes('300'));
    assert.equal(feeForTier({ ...t, feeMin: null, feeMax: null }, units(4550), 0), units(46)); // UGX has no minor units: 45.5 → 46
  });
  it('reports overlaps, gaps and precision with the items involved', () => {
    const issues = validateTiers(
      parseTiers([
        { min_amount: '0', max_amount: '100' },
        { min_amount: '50', max_amount: '200' },
        { min_amount: '300', fixed: '1.005' },
      ]),
      2,
    );
    const codes = issues.map((i) => i.code).sort();
    assert.deepEqual(codes, ['SCHEDULE_GAP', 'SCHEDULE_OVERLAP', 'SCHEDULE_PRECISION']);
    assert.deepEqual(issues.find((i) => i.code === 'SCHEDULE_OVERLAP')?.items, [0, 1]);
    assert.deepEqual(
      validateTiers(parseTiers([{ min_amount: '0', max_amount: '10' }, { min_amount: '10' }]), 2),
      [],
    );
    assert.equal(
      validateLimits(
        [
          { action: 'TRANSFER', period: 'day', maxAmount: units(10), maxCount: null, kycLevel: null },
          { action: 'TRANSFER', period: 'day', maxAmount: units(20), maxCount: null, kycLevel: null },
        ],
        2,
      )[0]?.code,
      'SCHEDULE_OVERLAP',
    );
  });
});

describe('quoteFee and limitRowsFor against the seeded demo schedules', () => {
  let tdb: TestDb;
  before(async () => {
    tdb = await freshDatabase();
    await seedDemo(tdb.db);
    await seedDemo(tdb.db); // idempotent
  });
  after(async () => tdb.drop());

  it('quotes each band of the TRANSFER fee schedule', async () => {
    const cases: [string, string][] = [
      ['50', '0'],
      ['100', '10'],
      ['999.99', '10'],
      ['1000', '15'],
      ['2345.67', '23.46'],
      ['40000', '300'],
    ];
    for (const [amount, fee] of cases) {
      const q = await quoteFee(tdb.db, {
        tenantId: 'demo',
        product: 'TRANSFER',
        amount: kes(amount),
        currency: 'KES',
      });
      assert.equal(q.fee, kes(fee), `fee for ${amount}`);
      assert.equal(q.currency, 'KES');
      assert.match(q.scheduleId, /^[0-9a-f-]{36}$/);
    }
    const { rows } = await tdb.db.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM admin_schedules WHERE tenant_id = 'demo'`,
    );
    assert.equal(rows[0]?.n, '2', 'seeding twice creates nothing new');
  });

  it('refuses a product without an active schedule and a non-ISO currency', async () => {
    await assert.rejects(
      quoteFee(tdb.db, { tenantId: 'demo', product: 'CASHIN', amount: kes('10'), currency: 'KES' }),
      (e: unknown) => e instanceof AppError && e.code === 'NO_ACTIVE_SCHEDULE',
    );
    await assert.rejects(
      quoteFee(tdb.db, { tenantId: 'demo', product: 'TRANSFER', amount: kes('10'), currency: 'KSH' }),
      (e: unknown) => e instanceof AppError && e.code === 'CURRENCY_INVALID',
    );
  });

  it('returns the TRANSFER limit rows and copies them to the ledger limit table', async () => {
    const rows = await limitRowsFor(tdb.db, {
      tenantId: 'demo',
      product: 'TRANSFER',
      action: 'TRANSFER',
      currency: 'KES',
    });
    assert.deepEqual(
      rows.map((r) => [r.period, r.maxAmount, r.maxCount]),
      [
        ['transaction', kes('150000'), null],
        ['day', kes('300000'), 20],
      ],
    );
    assert.deepEqual(
      await limitRowsFor(tdb.db, {
        tenantId: 'demo',
        product: 'TRANSFER',
        action: 'CASHOUT',
        currency: 'KES',
      }),
      [],
    );
    const { rows: ledger } = await tdb.db.query(
      `SELECT period FROM ledger_limit_rows WHERE tenant_id = 'demo' AND product_code = 'TRANSFER' AND active ORDER BY period`,
    );
    assert.deepEqual(
      ledger.map((r) => r.period),
      ['day', 'transaction'],
    );
  });
});
