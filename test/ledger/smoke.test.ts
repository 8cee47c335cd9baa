import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LedgerFixture, type Tenant } from './fixture.ts';

describe('ledger smoke', () => {
  let f: LedgerFixture;
  let t: Tenant;
  before(async () => {
    f = await LedgerFixture.start();
    t = await f.tenant();
  });
  after(() => f.close());

  it('funds, transfers, reads balances', async () => {
    const a = await f.account(t);
    const b = await f.account(t);
    await f.fund(t, a, '100.00');
    const r = await f.transfer(t, a, b, '12.50');
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.status, 'POSTED');
    assert.deepEqual(await f.balances(t, a), { account_id: a, currency: 'KES', posted: '87.50', pending_debits: '0.00', pending_credits: '0.00', available: '87.50', overdraft_limit: '0.00' });
  });
});
