/**
 * Issue 23 item 6: webhook dispatchers of several core instances over one database. Each
 * Dispatcher here has its own pool, as a separate instance would; only PostgreSQL is shared.
 * The receiver behaves by the payload: `failFirst` answers 503 to its first attempt, `hang`
 * holds its first attempt open until the test releases it, `dead` always answers 503.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { Dispatcher, type DispatcherOptions } from '../../core/admin/webhooks/dispatcher.ts';
import { newWebhookSecret } from '../../core/admin/webhooks/sign.ts';
import { sealWebhookSecret } from '../../core/admin/webhooks/store.ts';
import { exclusiveJobs, exclusiveLockClass } from '../../core/db/exclusive.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { enqueue } from '../../core/outbox/outbox.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { serve } from '../helpers/http.ts';

interface Payload {
  agg: string;
  n: number;
  failFirst?: boolean;
  hang?: boolean;
  dead?: boolean;
}
interface Receipt {
  id: string;
  status: number;
  p: Payload;
  body: string;
  headers: Record<string, string>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('webhook dispatch with two core instances', () => {
  let tdb: TestDb;
  let keys: KeyStore;
  const pools: Db[] = [];
  const receipts: Receipt[] = [];
  const hanging: ServerResponse[] = [];
  let onHang: (() => void) | undefined;
  let receiver: { origin: string; close(): Promise<void> };

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('demo', 'Demo', 'KE', 'KES')`,
    );
    const master = randomBytes(32);
    keys = new KeyStore(tdb.db, master);
    for (let i = 0; i < 2; i++)
      pools.push(
        createDb({ connectionString: tdb.url, metrics: createMetrics(), log: createLogger('silent') }),
      );
    receiver = await serve(
      createServer((req, res) => {
        let body = '';
        req.on('data', (c: Buffer) => {
          body += c.toString();
        });
        req.on('end', () => {
          const id = String(req.headers['webhook-id']);
          const p = (JSON.parse(body) as { data: Payload }).data;
          const seen = receipts.some((r) => r.id === id);
          const status = p.dead || (p.failFirst && !seen) ? 503 : 204;
          receipts.push({ id, status, p, body, headers: req.headers as Record<string, string> });
          if (p.hang && !seen) {
            hanging.push(res);
            onHang?.();
            return;
          }
          res.writeHead(status).end();
        });
      }),
    );
  });
  after(async () => {
    for (const r of hanging) if (!r.writableEnded) r.writeHead(204).end();
    await receiver.close();
    for (const p of pools) await p.close();
    await tdb.drop();
  });

  const endpoint = async (event: string): Promise<string> => {
    const id = randomUUID();
    const secret = newWebhookSecret();
    await tdb.db.query(
      'INSERT INTO admin_webhooks (id, tenant_id, url, events, secret_enc) VALUES ($1, $2, $3, $4, $5)',
      [id, 'demo', `${receiver.origin}/hook`, [event], sealWebhookSecret(keys, id, secret)],
    );
    return secret;
  };
  const dispatcher = (i: number, o: Partial<DispatcherOptions> = {}) =>
    new Dispatcher({
      db: pools[i] as Db,
      keys,
      log: createLogger('silent'),
      allowPrivateTargets: true,
      batchSize: 25,
      baseDelayMs: 20,
      maxDelayMs: 50,
      timeoutMs: 30_000,
      ...o,
    });
  const send = (event: string, p: Payload) =>
    enqueue(tdb.db, { tenantId: 'demo', aggregate: 'order', aggregateId: p.agg, event, payload: { ...p } });
  const of = (event: string) => receipts.filter((r) => JSON.parse(r.body).type === event);
  const deliveryRows = async (event: string) =>
    (
      await tdb.db.query<{
        outbox_id: string;
        status: string;
        attempts: number;
        lease_token: string | null;
        o_status: string;
        last_error: string | null;
      }>(
        `SELECT d.outbox_id, d.status, d.attempts, d.lease_token, o.status AS o_status, o.last_error FROM admin_webhook_deliveries d JOIN outbox o ON o.id = d.outbox_id WHERE o.event = $1 ORDER BY d.seq`,
        [event],
      )
    ).rows;

  it('two dispatchers deliver every message at least once, none twice, in order per aggregate across retried failures', async () => {
    const secret = await endpoint('order.placed');
    const aggregates = 30;
    const perAggregate = 10;
    const total = aggregates * perAggregate;
    const ids: string[] = [];
    const enqueueRound = async (n: number) => {
      for (let a = 0; a < aggregates; a++)
        ids.push(
          await send('order.placed', { agg: `a-${a}`, n, ...(n === 3 && a < 6 ? { failFirst: true } : {}) }),
        );
    };
    for (let n = 0; n < perAggregate / 2; n++) await enqueueRound(n);

    const ds = [dispatcher(0), dispatcher(1)];
    const attempts = [0, 0];
    let done = false;
    const loops = ds.map(async (d, i) => {
      while (!done) {
        attempts[i] = (attempts[i] as number) + (await d.tick());
        await sleep(2);
      }
    });
    // The rest arrives while both dispatchers run.
    for (let n = perAggregate / 2; n < perAggregate; n++) await enqueueRound(n);
    const deadline = Date.now() + 120_000;
    while (
      Date.now() < deadline &&
      (await deliveryRows('order.placed')).filter((r) => r.status === 'DELIVERED').length < total
    )
      await sleep(50);
    done = true;
    await Promise.all(loops);
    for (const d of ds) await d.stop();

    const got = of('order.placed');
    const ok = got.filter((r) => r.status === 204);
    const okPerId = new Map<string, number>();
    for (const r of ok) okPerId.set(r.id, (okPerId.get(r.id) ?? 0) + 1);
    assert.deepEqual(
      [...okPerId.keys()].sort(),
      ids.map((id) => `msg_${id}`).sort(),
      'every webhook-id delivered',
    );
    assert.deepEqual(
      [...okPerId.values()].filter((c) => c !== 1),
      [],
      'no message delivered twice',
    );
    assert.equal(
      got.length - ok.length,
      6,
      'one failed first attempt for each failFirst message, and nothing else failed',
    );
    for (let a = 0; a < aggregates; a++) {
      const ns = got.filter((r) => r.p.agg === `a-${a}`).map((r) => r.p.n);
      assert.deepEqual(
        ns.filter((n, i) => i > 0 && n < (ns[i - 1] as number)),
        [],
        `aggregate a-${a} received in order: ${ns.join(',')}`,
      );
      assert.deepEqual(
        ok.filter((r) => r.p.agg === `a-${a}`).map((r) => r.p.n),
        [...Array(perAggregate).keys()],
      );
    }
    for (const r of ok) new Webhook(secret).verify(r.body, r.headers);
    assert.ok(
      (attempts[0] as number) > 0 && (attempts[1] as number) > 0,
      `both dispatchers worked: ${attempts.join(' + ')}`,
    );
    const rows = await deliveryRows('order.placed');
    assert.deepEqual(
      rows.filter((r) => r.status !== 'DELIVERED' || r.o_status !== 'DELIVERED' || r.lease_token !== null),
      [],
    );
  });

  it('routes one instance at a time: a later message of an aggregate is not delivered while another instance routes the earlier one', async () => {
    await endpoint('order.returned');
    const first = await send('order.returned', { agg: 'r-1', n: 0 });
    await send('order.returned', { agg: 'r-1', n: 1 });
    // Instance A is routing message 0: it holds the routing lock and the message's row.
    const a = await (pools[0] as Db).pool.connect();
    await a.query('BEGIN');
    await a.query('SELECT pg_advisory_xact_lock($1, $2)', [exclusiveLockClass, exclusiveJobs.outboxRouting]);
    await a.query('SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE', [first]);
    const b = dispatcher(1);
    assert.equal(await b.tick(), 0, 'instance B neither routes past message 0 nor delivers message 1');
    assert.equal(
      (await tdb.db.query(`SELECT 1 FROM outbox WHERE event = 'order.returned' AND routed_at IS NOT NULL`))
        .rowCount,
      0,
    );
    await a.query('ROLLBACK');
    a.release();
    while (of('order.returned').length < 2) assert.ok((await b.tick()) > 0);
    await b.stop();
    assert.deepEqual(
      of('order.returned').map((r) => r.p.n),
      [0, 1],
    );
  });

  it('events of one aggregate written in one transaction are delivered in the order written', async () => {
    await endpoint('order.amended');
    await tdb.db.tx(async (q) => {
      for (let n = 0; n < 30; n++)
        await enqueue(q, {
          tenantId: 'demo',
          aggregate: 'order',
          aggregateId: 'm-1',
          event: 'order.amended',
          payload: { agg: 'm-1', n },
        });
    });
    const d = dispatcher(0);
    while (of('order.amended').length < 30) assert.ok((await d.tick()) > 0);
    await d.stop();
    assert.deepEqual(
      of('order.amended').map((r) => r.p.n),
      [...Array(30).keys()],
    );
  });

  it('a dispatcher that stops answering holding leases has its deliveries taken over once the leases run out; it sends no more and records nothing', async () => {
    await endpoint('order.shipped');
    const first = await send('order.shipped', { agg: 'h-1', n: 0, hang: true });
    await send('order.shipped', { agg: 'h-1', n: 1 });
    const other = await send('order.shipped', { agg: 'h-2', n: 0 });
    let skewMs = 0;
    const a = dispatcher(0);
    const b = dispatcher(1, { now: () => Date.now() + skewMs });
    const hung = new Promise<void>((r) => {
      onHang = r;
    });
    const stuck = a.tick(); // claims h-1/0 and h-2/0, sends h-1/0: the receiver got it and never answers
    await hung;
    assert.equal(
      await b.tick(),
      0,
      'leased: the other dispatcher takes neither, nor delivers h-1/1 past h-1/0',
    );
    assert.deepEqual(
      of('order.shipped').map((r) => r.p.n),
      [0],
    );

    skewMs = 2 * 2 * 30_000; // past the lease (2 × timeoutMs) on the other instance's clock
    assert.equal(await b.tick(), 2, 'the expired leases are taken over');
    assert.equal(await b.tick(), 1, 'then the next message of the aggregate');
    (hanging.at(-1) as ServerResponse).writeHead(503).end(); // the first holder wakes up to a failure
    assert.equal(await stuck, 1, 'it does not send h-2/0, whose lease it lost');
    await a.stop();
    await b.stop();

    const got = of('order.shipped');
    assert.deepEqual(
      got.filter((r) => r.p.agg === 'h-1').map((r) => [r.p.n, r.id]),
      [
        [0, `msg_${first}`],
        [0, `msg_${first}`],
        [1, got.at(-1)?.id],
      ],
      'redelivered with the same webhook-id, then the next',
    );
    assert.deepEqual(
      got.filter((r) => r.p.agg === 'h-2').map((r) => r.id),
      [`msg_${other}`],
      'delivered once',
    );
    const rows = await deliveryRows('order.shipped');
    assert.deepEqual(
      rows.map((r) => [r.status, r.attempts, r.lease_token, r.o_status]),
      Array(3).fill(['DELIVERED', 1, null, 'DELIVERED']),
      'the holder that lost its leases recorded nothing',
    );
  });

  it('a dead-lettered message is recorded and no longer blocks the next message of its aggregate', async () => {
    await endpoint('order.cancelled');
    const dead = await send('order.cancelled', { agg: 'x-1', n: 0, dead: true });
    const next = await send('order.cancelled', { agg: 'x-1', n: 1 });
    let clock = Date.now();
    const d = dispatcher(0, { now: () => clock, maxAttempts: 3, baseDelayMs: 1000, maxDelayMs: 1000 });
    for (let i = 0; i < 6; i++) {
      await d.tick();
      clock += 10_000;
    }
    await d.stop();
    assert.deepEqual(
      of('order.cancelled').map((r) => [r.p.n, r.status]),
      [
        [0, 503],
        [0, 503],
        [0, 503],
        [1, 204],
      ],
    );
    const rows = await deliveryRows('order.cancelled');
    assert.deepEqual(
      rows.map((r) => [r.outbox_id, r.status, r.attempts, r.o_status]),
      [
        [dead, 'DEAD', 3, 'DEAD'],
        [next, 'DELIVERED', 1, 'DELIVERED'],
      ],
    );
    assert.equal(rows[0]?.last_error, 'HTTP 503');
  });
});
