/** ledger_apply's batch-wide first checks through the gateway: bad commands beside good ones, each answered in place. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { randomUUID } from 'node:crypto';
import type { Res } from '../helpers/http.ts';
import { LedgerFixture, type Tenant } from './fixture.ts';
import { setCurrency } from '../../core/ledger/currency.ts';

describe('ledger batch-wide first checks through the gateway', () => {
  let f: LedgerFixture;
  let a: Tenant;
  let b: Tenant;
  before(async () => {
    f = await LedgerFixture.start();
    a = await f.tenant(['KES']);
    b = await f.tenant(['KES']);
  });
  after(() => f.close());

  it('bad amounts, frozen debits and foreign or malformed holds beside good commands of two tenants: each answered in place, never a 500', async () => {
    const [a1, a2, fz, b1, b2] = [
      await f.account(a),
      await f.account(a),
      await f.account(a),
      await f.account(b),
      await f.account(b),
    ];
    for (const [t, x] of [
      [a, a1],
      [a, fz],
      [b, b1],
    ] as const)
      await f.fund(t, x, '100.00');
    const hold = (t: Tenant, from: string, to: string, amount: string) =>
      f.req(t.write, 'POST', '/v1/core/holds', {
        debit_account_id: from,
        credit_account_id: to,
        currency: 'KES',
        amount,
      });
    const bHold = await hold(b, b1, b2, '5.00');
    assert.equal(bHold.status, 201, bHold.text);
    const aHold = await hold(a, a1, a2, '5.00');
    assert.equal(aHold.status, 201, aHold.text);
    await f.db.query(
      `INSERT INTO wallet_fraud_holds (tenant_id, id, account_id, reason, placed_by, placed_at) VALUES ($1, $2, $3, 'gw batch', 'staff:fraud-1', now())`,
      [a.id, randomUUID(), fz],
    );
    const capture = (t: Tenant, id: string, body: unknown) =>
      f.req(t.write, 'POST', `/v1/core/holds/${id}/capture`, body);
    const refusedKey = `k-${randomUUID()}`;
    const cases: [string, () => Promise<Res>, number | number[], string?][] = [
      ['good a', () => f.transfer(a, a1, a2, '1.00'), 201],
      ['good b', () => f.transfer(b, b1, b2, '1.00'), 201],
      ['finer than KES', () => f.transfer(a, a1, a2, '0.001'), 422, 'INVALID_AMOUNT'],
      ['1e-7', () => f.transfer(a, a1, a2, '1e-7'), 422, 'INVALID_AMOUNT'],
      ['0.1000000', () => f.transfer(a, a1, a2, '0.1000000'), [201, 422]],
      ['negative', () => f.transfer(a, a1, a2, '-1.00'), 422, 'INVALID_AMOUNT'],
      ['huge', () => f.transfer(a, a1, a2, '1e30'), 422, 'INVALID_AMOUNT'],
      ['huge digits', () => f.transfer(a, a1, a2, '9'.repeat(40)), 422],
      ['NaN', () => f.transfer(a, a1, a2, 'NaN'), 422],
      ['Infinity', () => f.transfer(a, a1, a2, 'Infinity'), 422],
      ['plus sign', () => f.transfer(a, a1, a2, '+1.00'), [201, 422]],
      ['spaces', () => f.transfer(a, a1, a2, ' 1.00 '), [201, 422]],
      ['arabic digits', () => f.transfer(a, a1, a2, '\u0661'), 422],
      ['number, not text', () => f.transfer(a, a1, a2, 1.5 as unknown as string), [400, 422]],
      ['hold 1e-7', () => hold(a, a1, a2, '1e-7'), 422, 'INVALID_AMOUNT'],
      ['capture 1e-7', () => capture(a, aHold.json.id, { amount: '1e-7' }), 422, 'INVALID_AMOUNT'],
      ['capture negative', () => capture(a, aHold.json.id, { amount: '-1.00' }), 422],
      ['frozen debit', () => f.transfer(a, fz, a2, '1.00'), 422, 'ACCOUNT_FROZEN'],
      ['frozen debit, finer', () => f.transfer(a, fz, a2, '0.001'), 422, 'INVALID_AMOUNT'],
      ['frozen credit', () => f.transfer(a, a1, fz, '1.00'), 201],
      ['frozen hold', () => hold(a, fz, a2, '1.00'), 422, 'ACCOUNT_FROZEN'],
      ['hold finer', () => hold(a, a1, a2, '0.015'), 422, 'INVALID_AMOUNT'],
      ['foreign capture', () => capture(a, bHold.json.id, { amount: '1.00' }), 404, 'HOLD_NOT_FOUND'],
      ['foreign capture finer', () => capture(a, bHold.json.id, { amount: '0.001' }), [404, 422]],
      ['capture not uuid', () => capture(a, 'not-a-uuid', { amount: '1.00' }), [400, 404]],
      ['capture not uuid, no amount', () => capture(a, 'not-a-uuid', {}), [400, 404]],
      ['partial capture finer', () => capture(a, aHold.json.id, { amount: '0.001' }), 422, 'INVALID_AMOUNT'],
      ['refused, first', () => f.transfer(a, fz, a2, '1.00', 'KES', refusedKey), 422, 'ACCOUNT_FROZEN'],
      ['good a 2', () => f.transfer(a, a1, a2, '2.00'), 201],
      ['good b 2', () => f.transfer(b, b1, b2, '2.00'), 201],
    ];
    const answers = await Promise.all(cases.map(([, run]) => run()));
    const wrong = cases.flatMap(([name, , status, code], i) => {
      const r = answers[i]!;
      const ok =
        (Array.isArray(status) ? status : [status]).includes(r.status) && (!code || r.json?.code === code);
      return ok ? [] : [`${name}: ${r.status} ${r.text}`];
    });
    assert.deepEqual(wrong, []);
    const retry = await f.transfer(a, fz, a2, '1.00', 'KES', refusedKey);
    assert.equal(retry.json?.code, 'ACCOUNT_FROZEN', retry.text);
    const landed = cases.flatMap(([name], i) =>
      name.startsWith('good a') || answers[i]!.status === 201 ? [name] : [],
    );
    assert.deepEqual(landed, ['good a', 'good b', 'frozen credit', 'good a 2', 'good b 2']);
    assert.equal((await f.balances(a, a2)).posted, '3.00');
    assert.equal((await f.balances(a, fz)).posted, '101.00');
  });

  it("amounts in a currency the table re-scaled behind core's snapshot, beside good and frozen commands: refused by ledger_apply in place", async () => {
    const c = await f.tenant(['KES']);
    // Another instance re-scaled USD (no account held it): this core's snapshot has not heard yet.
    await f.db.query('ALTER TABLE admin_currencies DISABLE TRIGGER currencies_changed');
    await f.db.query(`UPDATE admin_currencies SET minor_units = 0 WHERE code = 'USD'`);
    await f.db.query('ALTER TABLE admin_currencies ENABLE TRIGGER currencies_changed');
    c.settlement.USD = await (await import('./tenant-db.ts')).openSettlement(f.db, c.id, 'USD');
    const [u1, u2, k1, k2, kf] = [
      await f.account(c, 'USD'),
      await f.account(c, 'USD'),
      await f.account(c),
      await f.account(c),
      await f.account(c),
    ];
    await f.fund(c, u1, '100', 'USD');
    await f.fund(c, k1, '100.00');
    await f.fund(c, kf, '100.00');
    const open = await f.req(c.write, 'POST', '/v1/core/holds', {
      debit_account_id: u1,
      credit_account_id: u2,
      currency: 'USD',
      amount: '10',
    });
    assert.equal(open.status, 201, open.text);
    await f.db.query(
      `INSERT INTO wallet_fraud_holds (tenant_id, id, account_id, reason, placed_by, placed_at) VALUES ($1, $2, $3, 'gw batch', 'staff:fraud-1', now())`,
      [c.id, randomUUID(), kf],
    );
    setCurrency('USD', 2); // this core's snapshot lags the table
    const key = `k-${randomUUID()}`;
    const cases: [string, () => Promise<Res>, number, string?][] = [
      ['good usd', () => f.transfer(c, u1, u2, '10', 'USD'), 201],
      ['usd cents', () => f.transfer(c, u1, u2, '10.50', 'USD', key), 422, 'INVALID_AMOUNT'],
      [
        'usd hold cents',
        () =>
          f.req(c.write, 'POST', '/v1/core/holds', {
            debit_account_id: u1,
            credit_account_id: u2,
            currency: 'USD',
            amount: '0.5',
          }),
        422,
        'INVALID_AMOUNT',
      ],
      [
        'usd partial capture cents',
        () => f.req(c.write, 'POST', `/v1/core/holds/${open.json.id}/capture`, { amount: '0.50' }),
        422,
        'INVALID_AMOUNT',
      ],
      ['good kes', () => f.transfer(c, k1, k2, '1.00'), 201],
      ['frozen', () => f.transfer(c, kf, k2, '1.00'), 422, 'ACCOUNT_FROZEN'],
      ['good kes 2', () => f.transfer(c, k1, k2, '2.00'), 201],
    ];
    const answers = await Promise.all(cases.map(([, run]) => run()));
    const wrong = cases.flatMap(([name, , status, code], i) =>
      answers[i]!.status === status && (!code || answers[i]!.json?.code === code)
        ? []
        : [`${name}: ${answers[i]!.status} ${answers[i]!.text}`],
    );
    assert.deepEqual(wrong, []);
    assert.deepEqual(
      answers.slice(1, 4).map((r) => r.json.message),
      Array(3).fill('an amount has more decimals than USD has minor units'),
      "ledger_apply refused them (not core's lagging snapshot) and names the currency, a partial capture's its hold's",
    );
    const retry = await f.transfer(c, u1, u2, '10.50', 'USD', key);
    assert.equal(retry.json?.code, 'INVALID_AMOUNT', retry.text);
    assert.equal(Number((await f.balances(c, u2)).posted), 10);
    assert.equal((await f.balances(c, k2)).posted, '3.00');
    const captured = await f.req(c.write, 'POST', `/v1/core/holds/${open.json.id}/capture`, { amount: '5' });
    assert.equal(captured.status, 200, captured.text);
  });
});
