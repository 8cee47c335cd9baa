/**
 * A currency's addition, re-scale and deletion raced concurrently, repeatedly, through the admin
 * and core APIs, against writes that lock its row or its code (schedule activation, savings
 * product and API-key budget creation): each is answered 2xx or 4xx, none 5xx or hung.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { clientToken } from '../helpers/core-client.ts';
import type { Res } from '../helpers/http.ts';
import { timed } from '../helpers/timed.ts';
import { freshlyKeyed, startAdmin, type AdminHarness } from './harness.ts';

const deadlineMs = 15_000;
const codes = ['LYD', 'TTD', 'JMD', 'BBD'];

describe('currency writes raced against the writes that read its minor units', () => {
  let h: AdminHarness;
  let token = '';
  const { admin, ledger } = freshlyKeyed(
    () => h,
    () => token,
    'storm',
  );
  before(async () => {
    h = await startAdmin();
    token = await clientToken(h.tdb.db, h.origin, 'demo', ['core:read', 'core:write']);
  });
  after(async () => h?.close());

  const timedBy = (name: string, p: Promise<Res>) => timed(name, p, deadlineMs);

  it('every request is answered, none 5xx or past its deadline', async () => {
    const all: { name: string; status: number; text: string }[] = [];
    for (let round = 0; round < 4; round++) {
      const rs = await Promise.all(
        codes.flatMap(async (code, i) => {
          const fee = await admin('POST', '/v1/schedules', {
            kind: 'FEE',
            product: 'TRANSFER',
            currency: code,
          });
          assert.equal(fee.status, 201, fee.text);
          await admin('POST', `/v1/schedules/${fee.json.id}/fees`, {
            items: [{ min_amount: '0', fixed: '0.125', percent_bps: 100 }],
          });
          const etag = (await admin('GET', `/v1/schedules/${fee.json.id}`)).headers.etag ?? '';
          return Promise.all([
            timedBy('add', admin('POST', '/v1/currencies', { code, minor_units: 2 })),
            timedBy(
              'activate',
              admin('PATCH', `/v1/schedules/${fee.json.id}`, { status: 'ACTIVE' }, { 'if-match': etag }),
            ),
            timedBy(
              'rescale',
              admin('PATCH', `/v1/currencies/${code}`, { minor_units: round % 2 }, { 'if-match': '*' }),
            ),
            timedBy(
              'product',
              ledger('/v1/core/savings-products', {
                code: `S_${code}_${round}_${i}`,
                name: 'saver',
                currency: code,
                interest_rate_bps: 100,
                min_balance: '10.50',
              }),
            ),
            timedBy(
              'key',
              admin('POST', '/api-keys', {
                name: `k-${code}-${round}`,
                scopes: ['core:write'],
                budget: { daily_amount: '5.50', currency: code },
              }),
            ),
            timedBy('delete', admin('DELETE', `/v1/currencies/${code}`, undefined, { 'if-match': '*' })),
            timedBy(
              'deactivate',
              admin('PATCH', `/v1/schedules/${fee.json.id}`, { status: 'ARCHIVED' }, { 'if-match': '*' }),
            ),
          ]);
        }),
      );
      all.push(...rs.flat());
      // What a round left configured is removed, so the next can add the currency again.
      await h.tdb.db.query(`DELETE FROM ledger_savings_products WHERE currency = ANY($1)`, [codes]);
      await h.tdb.db.query(`UPDATE api_keys SET revoked_at = now() WHERE budget ->> 'currency' = ANY($1)`, [
        codes,
      ]);
      await h.tdb.db.query(`UPDATE admin_schedules SET status = 'ARCHIVED' WHERE currency = ANY($1)`, [
        codes,
      ]);
      await h.tdb.db.query(`DELETE FROM admin_currencies WHERE code = ANY($1)`, [codes]);
    }
    const bad = all.filter((r) => r.status >= 500 || r.status < 0);
    assert.deepEqual(bad, [], JSON.stringify(bad));
  });
});
