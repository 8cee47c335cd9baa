/**
 * Webhook endpoints on operator-listed private networks (PRIVATE_TARGETS_ALLOWED, issue 23 item
 * 5): core given those CIDRs accepts an endpoint inside them at create time, as its dispatcher
 * delivers there, and still refuses other private, loopback and metadata targets.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startAdmin, type AdminHarness } from './harness.ts';

describe('webhook targets on listed private networks', () => {
  let h: AdminHarness;
  let n = 0;
  const key = () => ({ 'idempotency-key': `cidr-key-${String(++n).padStart(6, '0')}` });
  before(async () => {
    h = await startAdmin({ seed: false, webhookAllowedCidrs: ['127.0.0.1/32', '10.20.0.0/16'] });
  });
  after(() => h.close());

  it('accepts an endpoint inside a listed CIDR and refuses one outside, or a metadata address', async () => {
    const admin = h.as('admin');
    for (const url of ['http://127.0.0.1:9/hook', 'http://10.20.3.4/hook']) {
      const r = await admin('POST', '/v1/webhooks', {
        json: { url, events: ['transfer.completed'] },
        headers: key(),
      });
      assert.equal(r.status, 201, `${url}: ${r.text}`);
    }
    for (const url of [
      'http://127.0.0.2/hook',
      'http://10.21.0.1/hook',
      'http://192.168.1.1/hook',
      'http://169.254.169.254/latest/meta-data/',
    ]) {
      const r = await admin('POST', '/v1/webhooks', {
        json: { url, events: ['transfer.completed'] },
        headers: key(),
      });
      assert.equal(r.status, 400, `${url}: ${r.text}`);
      assert.equal(r.json.code, 'WEBHOOK_INVALID', url);
    }
  });
});
