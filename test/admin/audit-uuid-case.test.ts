/**
 * GET /v1/audit `resource_id` and `actor` name a UUID whatever its case (RFC 9562 4), including
 * records whose writer stored the id as the caller spelled it: a fraud hold placed naming the
 * wallet in upper case (core/ledger/reads.ts accountRef reads any case) is audited with that
 * spelling, its lift with the wallet's canonical id. An investigator asking for the wallet's
 * records must get both, in either case, and nothing of another wallet or tenant.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { startAdmin, type AdminHarness } from './harness.ts';

describe('audit query by a UUID given in any case', () => {
  let h: AdminHarness;
  const wallet = randomUUID();
  const otherWallet = randomUUID();

  /** A customer wallet of `tenant`, as openAccount writes one. */
  async function openWallet(tenant: string, id: string): Promise<void> {
    await h.tdb.db.query(
      `INSERT INTO ledger_accounts (tenant_id, id, owner_type, owner_id, product_code, currency, debits_must_not_exceed_credits)
       VALUES ($1, $2, 'customer', $3, 'WALLET_MAIN', 'KES', true)`,
      [tenant, id, randomUUID()],
    );
    await h.tdb.db.query(
      'INSERT INTO ledger_balances (tenant_id, account_id, currency, debits_must_not_exceed_credits) VALUES ($1, $2, $3, true)',
      [tenant, id, 'KES'],
    );
  }

  const officer = (principal: string) => (method: string, path: string, json?: unknown) =>
    h.as('fraud')(method, path, {
      ...(json !== undefined ? { json } : {}),
      // The route requires the header; the edge verified it and vouches with its identity headers.
      headers: { 'x-principal-id': principal, 'x-aal': '2', authorization: 'Bearer staff-token' },
    });

  before(async () => {
    h = await startAdmin();
    await openWallet('demo', wallet);
    await openWallet('demo', otherWallet);
    const placed = await officer('officer-1')('POST', '/v1/fraud/holds', {
      accountId: wallet.toUpperCase(),
      reason: 'mule pattern',
    });
    assert.equal(placed.status, 201, placed.text);
    const lifted = await officer('officer-2')('POST', `/v1/fraud/holds/${placed.json.id}:lift`, {
      reason: 'cleared',
    });
    assert.equal(lifted.status, 200, lifted.text);
    const elsewhere = await officer('officer-1')('POST', '/v1/fraud/holds', {
      accountId: otherWallet,
      reason: 'another wallet',
    });
    assert.equal(elsewhere.status, 201, elsewhere.text);
  });
  after(async () => h.close());

  for (const spelled of ['lower', 'upper'] as const) {
    it(`finds the placing and the lifting of a hold by the wallet's id in ${spelled} case`, async () => {
      const id = spelled === 'upper' ? wallet.toUpperCase() : wallet;
      const r = await h.as('readonly')('GET', `/v1/audit?resource=wallet&resource_id=${id}`);
      assert.equal(r.status, 200, r.text);
      const items = r.json.items as { action: string; target: { id: string } }[];
      assert.deepEqual(
        items.map((i) => i.action).sort(),
        ['fraud_hold.lift', 'fraud_hold.place'],
        JSON.stringify(items),
      );
      for (const i of items) assert.equal(i.target.id.toLowerCase(), wallet, 'only that wallet');
    });
  }

  it("finds nothing of that wallet from another tenant's chain", async () => {
    const r = await h.as('readonly', 'other')(
      'GET',
      `/v1/audit?resource=wallet&resource_id=${wallet.toUpperCase()}`,
    );
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.items, []);
  });

  it('still matches an id that is not a UUID exactly as given', async () => {
    const r = await h.as('readonly')('GET', '/v1/audit?actor=OFFICER-1');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.items, [], 'officer-1 is not OFFICER-1');
    const exact = await h.as('readonly')('GET', '/v1/audit?actor=officer-1&resource=wallet');
    assert.equal(exact.json.items.length, 2, exact.text);
  });
});
