import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { Dispatcher, backoffMs } from '../../core/admin/webhooks/dispatcher.ts';
import { enqueue } from '../../core/outbox/outbox.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { serve } from '../helpers/http.ts';
import { startAdmin, type AdminHarness } from './harness.ts';

interface Received {
  headers: IncomingMessage['headers'];
  body: string;
}

describe('webhook delivery (Standard Webhooks)', () => {
  let h: AdminHarness;
  let receiver: { origin: string; close(): Promise<void> };
  const received: Received[] = [];
  let failuresLeft = 2;
  before(async () => {
    h = await startAdmin({ seed: false, allowPrivateWebhookTargets: true });
    receiver = await serve(
      createServer((req, res) => {
        let body = '';
        req.on('data', (c: Buffer) => {
          body += c.toString();
        });
        req.on('end', () => {
          received.push({ headers: req.headers, body });
          if (req.url === '/flaky' && failuresLeft-- > 0) res.writeHead(503).end();
          else res.writeHead(204).end();
        });
      }),
    );
  });
  after(async () => {
    await receiver.close();
    await h.close();
  });

  it('backs off exponentially with jitter inside [base/2, base × 2^(n-1)]', () => {
    assert.equal(
      backoffMs(1, 1000, 60_000, () => 0.999),
      999,
    );
    assert.equal(
      backoffMs(4, 1000, 60_000, () => 0.5),
      4000,
    );
    assert.equal(
      backoffMs(30, 1000, 60_000, () => 0.999),
      59_940,
    );
    assert.equal(
      backoffMs(3, 1000, 60_000, () => 0),
      500,
    );
  });

  it('signs :test so the standardwebhooks library verifies it; a rotated secret keeps the old one valid in grace', async () => {
    const admin = h.as('admin');
    const made = await admin('POST', '/v1/webhooks', {
      json: { url: `${receiver.origin}/ok`, events: ['tenant.suspended'] },
      headers: { 'idempotency-key': 'hook-test-00001' },
    });
    assert.equal(made.status, 201, made.text);
    const t = await admin('POST', `/v1/webhooks/${made.json.id}:test`);
    assert.equal(t.json.delivered, true, t.text);
    const msg = received.at(-1);
    assert.ok(msg);
    const verified = new Webhook(made.json.secret).verify(
      msg.body,
      msg.headers as Record<string, string>,
    ) as { type: string };
    assert.equal(verified.type, 'webhook.tested');
    const rotated = await admin('PATCH', `/v1/webhooks/${made.json.id}`, {
      json: { rotateSecret: true, graceSeconds: 600 },
    });
    assert.match(rotated.json.secret, /^whsec_/);
    await admin('POST', `/v1/webhooks/${made.json.id}:test`);
    const next = received.at(-1);
    assert.ok(next);
    for (const secret of [made.json.secret, rotated.json.secret])
      new Webhook(secret).verify(next.body, next.headers as Record<string, string>);
    assert.throws(() =>
      new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(
        next.body,
        next.headers as Record<string, string>,
      ),
    );
    assert.doesNotMatch((await h.as('readonly')('GET', `/v1/webhooks/${made.json.id}`)).text, /whsec_/);
  });

  it('delivers outbox events in order per aggregate, retrying a receiver that fails twice, and dead-letters after the bounded attempts', async () => {
    const admin = h.as('admin');
    const flaky = await admin('POST', '/v1/webhooks', {
      json: { url: `${receiver.origin}/flaky`, events: ['order.placed'] },
      headers: { 'idempotency-key': 'hook-flaky-0001' },
    });
    const dead = await admin('POST', '/v1/webhooks', {
      json: { url: 'http://127.0.0.1:9/unreachable', events: ['order.placed'] },
      headers: { 'idempotency-key': 'hook-dead-00001' },
    });
    assert.equal(dead.status, 201);
    const ids = [];
    for (const n of [1, 2])
      ids.push(
        await enqueue(h.tdb.db, {
          tenantId: 'demo',
          aggregate: 'order',
          aggregateId: 'o-1',
          event: 'order.placed',
          payload: { n },
        }),
      );
    let clock = Date.now();
    const metrics = createMetrics();
    const d = new Dispatcher({
      db: h.tdb.db,
      keys: h.keys,
      log: createLogger('silent'),
      now: () => clock,
      random: () => 1,
      baseDelayMs: 1000,
      maxAttempts: 3,
      timeoutMs: 2000,
      allowPrivateTargets: true,
      deadLettered: metrics.webhookDeadLettered,
    });
    const before = received.length;
    for (let i = 0; i < 6; i++) {
      await d.tick();
      clock += 10_000;
    }
    const flakyHits = received.slice(before).filter((r) => JSON.parse(r.body).type === 'order.placed');
    assert.equal(flakyHits.length, 4, 'two failures, then event 1, then event 2');
    const order = flakyHits.slice(2).map((r) => JSON.parse(r.body).data.n);
    assert.deepEqual(order, [1, 2]);
    assert.equal(
      flakyHits[0]?.headers['webhook-id'],
      flakyHits[2]?.headers['webhook-id'],
      'a retry keeps its webhook-id',
    );
    const { rows } = await h.tdb.db.query<{ webhook_id: string; status: string; attempts: number }>(
      'SELECT webhook_id, status, attempts FROM admin_webhook_deliveries ORDER BY seq',
    );
    assert.ok(rows.filter((r) => r.webhook_id === flaky.json.id).every((r) => r.status === 'DELIVERED'));
    assert.ok(
      rows.filter((r) => r.webhook_id === dead.json.id).some((r) => r.status === 'DEAD' && r.attempts === 3),
    );
    // Each dead-lettered delivery is counted once for the on-call alert (deploy/prometheus/alerts.yaml).
    const deadCount = rows.filter((r) => r.status === 'DEAD').length;
    assert.ok(deadCount > 0);
    assert.match(
      await metrics.registry.metrics(),
      new RegExp(`^webhook_deliveries_dead_lettered_total ${deadCount}$`, 'm'),
    );
    const ob = await h.as('ops')('GET', `/v1/outbox/${ids[0]}`);
    assert.equal(ob.json.status, 'DEAD');
    const retry = await h.as('ops')('POST', `/v1/outbox/${ids[0]}:retry`);
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.json.status, 'PENDING');
  });

  it("clears a message's last error once every delivery of it succeeded", async () => {
    failuresLeft = 1;
    const hook = await h.as('admin')('POST', '/v1/webhooks', {
      json: { url: `${receiver.origin}/flaky`, events: ['invoice.paid'] },
      headers: { 'idempotency-key': 'hook-flaky-0002' },
    });
    assert.equal(hook.status, 201, hook.text);
    const id = await enqueue(h.tdb.db, {
      tenantId: 'demo',
      aggregate: 'invoice',
      aggregateId: 'i-1',
      event: 'invoice.paid',
      payload: {},
    });
    let clock = Date.now();
    const d = new Dispatcher({
      db: h.tdb.db,
      keys: h.keys,
      log: createLogger('silent'),
      now: () => clock,
      random: () => 1,
      baseDelayMs: 1000,
      maxAttempts: 3,
      timeoutMs: 2000,
      allowPrivateTargets: true,
    });
    await d.tick();
    const failed = await h.as('ops')('GET', `/v1/outbox/${id}`);
    assert.equal(failed.json.status, 'PENDING');
    assert.match(
      String(failed.json.last_error),
      /503/,
      'the failed attempt is visible while the message is pending',
    );
    for (let i = 0; i < 3; i++) {
      clock += 10_000;
      await d.tick();
    }
    const done = await h.as('ops')('GET', `/v1/outbox/${id}`);
    assert.equal(done.json.status, 'DELIVERED');
    assert.equal(done.json.last_error, null);
  });
});
