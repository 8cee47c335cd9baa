import assert from 'node:assert/strict';
import type { LookupAddress } from 'node:dns';
import { createServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Dispatcher } from '../../core/admin/webhooks/dispatcher.ts';
import { TargetGuard, TargetRefused, classifyAddress } from '../../core/admin/webhooks/target.ts';
import { enqueue } from '../../core/outbox/outbox.ts';
import { createLogger } from '../../shared/log.ts';
import { serve } from '../helpers/http.ts';
import { startAdmin, type AdminHarness } from './harness.ts';

describe('webhook SSRF guard', () => {
  let strict: AdminHarness;
  let lax: AdminHarness;
  let receiver: { origin: string; close(): Promise<void> };
  const hits: string[] = [];
  let n = 0;
  const key = () => ({ 'idempotency-key': `ssrf-key-${String(++n).padStart(6, '0')}` });

  before(async () => {
    strict = await startAdmin({ seed: false });
    lax = await startAdmin({ seed: false, allowPrivateWebhookTargets: true });
    receiver = await serve(
      createServer((req, res) => {
        hits.push(req.url ?? '');
        req.resume();
        req.on('end', () => res.writeHead(204).end());
      }),
    );
  });
  after(async () => {
    await receiver.close();
    await strict.close();
    await lax.close();
  });

  it('classifies loopback, private, link-local, CGNAT, metadata and reserved addresses, IPv4 and IPv6', () => {
    const table: [string, string | undefined][] = [
      ['127.0.0.1', 'loopback'],
      ['127.255.1.2', 'loopback'],
      ['::1', 'loopback'],
      ['::ffff:127.0.0.1', 'loopback'],
      ['::ffff:7f00:1', 'loopback'],
      ['10.1.2.3', 'private'],
      ['172.16.0.1', 'private'],
      ['172.31.255.255', 'private'],
      ['192.168.0.10', 'private'],
      ['fd12:3456::1', 'private'],
      ['fc00::1', 'private'],
      ['169.254.1.1', 'link-local'],
      ['fe80::1', 'link-local'],
      ['100.64.0.1', 'cgnat'],
      ['100.127.255.254', 'cgnat'],
      ['169.254.169.254', 'metadata'],
      ['168.63.129.16', 'metadata'],
      ['100.100.100.200', 'metadata'],
      ['fd00:ec2::254', 'metadata'],
      ['::ffff:169.254.169.254', 'metadata'],
      ['0.0.0.0', 'unspecified'],
      ['::', 'unspecified'],
      ['224.0.0.1', 'multicast'],
      ['ff02::1', 'multicast'],
      ['255.255.255.255', 'reserved'],
      ['64:ff9b::a00:1', 'private'],
      ['8.8.8.8', undefined],
      ['172.32.0.1', undefined],
      ['100.128.0.1', undefined],
      ['93.184.215.14', undefined],
      ['2606:4700::1111', undefined],
      ['::ffff:8.8.8.8', undefined],
    ];
    for (const [ip, want] of table) assert.equal(classifyAddress(ip), want, ip);
  });

  it('refuses private, loopback and metadata targets at create and PATCH with 400 WEBHOOK_INVALID', async () => {
    const admin = strict.as('admin');
    const bad = [
      'http://127.0.0.1:9/hook',
      'http://[::1]/hook',
      'http://localhost:8080/hook',
      'http://api.localhost/hook',
      'http://10.0.0.8/hook',
      'http://172.20.1.1/hook',
      'https://192.168.1.1/hook',
      'http://100.64.10.10/hook',
      'http://169.254.169.254/latest/meta-data/',
      'http://metadata.google.internal/computeMetadata/v1/',
      'http://[fd00::1]/hook',
      'http://[::ffff:127.0.0.1]/hook',
      'http://2130706433/hook',
      'http://0x7f000001/hook',
      'http://0/hook',
      'http://[fe80::1]/hook',
      'gopher://example.com/x',
      'file:///etc/passwd',
    ];
    for (const url of bad) {
      const r = await admin('POST', '/v1/webhooks', {
        json: { url, events: ['tenant.suspended'] },
        headers: key(),
      });
      assert.equal(r.status, 400, `${url}: ${r.text}`);
      assert.equal(r.json.code, 'WEBHOOK_INVALID', url);
    }
    const ok = await admin('POST', '/v1/webhooks', {
      json: { url: 'https://hooks.example.com/in', events: ['tenant.suspended'] },
      headers: key(),
    });
    assert.equal(ok.status, 201, ok.text);
    const p = await admin('PATCH', `/v1/webhooks/${ok.json.id}`, {
      json: { url: 'http://169.254.169.254/' },
    });
    assert.equal(p.status, 400);
    assert.equal(p.json.reason, 'metadata');
    assert.equal(
      (await admin('GET', `/v1/webhooks/${ok.json.id}`)).json.url,
      'https://hooks.example.com/in',
      'the refused PATCH changed nothing',
    );
  });

  it('resolves names at create time: a name that resolves to a private address is refused', async () => {
    const to =
      (address: string, family = 4) =>
      async (): Promise<LookupAddress[]> => [
        { address: '93.184.215.14', family: 4 },
        { address, family },
      ];
    await assert.rejects(
      new TargetGuard({ lookup: to('10.0.0.5') }).check(new URL('https://internal.example.com/')),
      (e: unknown) => e instanceof TargetRefused && e.reason === 'private',
    );
    await assert.rejects(
      new TargetGuard({ lookup: to('::1', 6) }).check(new URL('https://v6.example.com/')),
      (e: unknown) => e instanceof TargetRefused && e.reason === 'loopback',
    );
    await new TargetGuard({ lookup: async () => [{ address: '93.184.215.14', family: 4 }] }).check(
      new URL('https://public.example.com/'),
    );
    await new TargetGuard({
      lookup: async () => [{ address: '10.0.0.5', family: 4 }],
      allowPrivateTargets: true,
    }).check(new URL('https://internal.example.com/'));
    await assert.rejects(
      new TargetGuard({ allowPrivateTargets: true }).check(new URL('http://169.254.169.254/')),
      (e: unknown) => e instanceof TargetRefused && e.reason === 'metadata',
      'metadata is refused even when private targets are allowed',
    );
  });

  it('checks again at delivery: an IP target or a name that now resolves to loopback gets no request; the test-time allowance delivers', async () => {
    const port = new URL(receiver.origin).port;
    // Created where private targets are allowed, then delivered by a dispatcher that does not allow them.
    const admin = lax.as('admin');
    const literal = await admin('POST', '/v1/webhooks', {
      json: { url: `${receiver.origin}/literal`, events: ['order.placed'] },
      headers: key(),
    });
    assert.equal(literal.status, 201, literal.text);
    // A public-looking name that (now) resolves to 127.0.0.1: DNS rebinding after the create-time check.
    const named = await admin('POST', '/v1/webhooks', {
      json: { url: `http://rebind.example.com:${port}/named`, events: ['order.shipped'] },
      headers: key(),
    });
    assert.equal(named.status, 201, named.text);
    const toLoopback = async (): Promise<LookupAddress[]> => [{ address: '127.0.0.1', family: 4 }];
    await enqueue(lax.tdb.db, {
      tenantId: 'demo',
      aggregate: 'order',
      aggregateId: 'o-1',
      event: 'order.placed',
      payload: {},
    });
    await enqueue(lax.tdb.db, {
      tenantId: 'demo',
      aggregate: 'order',
      aggregateId: 'o-2',
      event: 'order.shipped',
      payload: {},
    });
    let clock = Date.now();
    const guarded = new Dispatcher({
      db: lax.tdb.db,
      keys: lax.keys,
      log: createLogger('silent'),
      now: () => clock,
      random: () => 1,
      maxAttempts: 2,
      targets: new TargetGuard({ lookup: toLoopback }),
    });
    for (let i = 0; i < 3; i++) {
      await guarded.tick();
      clock += 60_000;
    }
    await guarded.stop();
    assert.deepEqual(hits, [], 'no request reached the private receiver');
    const { rows } = await lax.tdb.db.query<{ webhook_id: string; status: string; last_error: string }>(
      'SELECT webhook_id, status, last_error FROM admin_webhook_deliveries ORDER BY seq',
    );
    assert.equal(rows.length, 2);
    for (const r of rows) {
      assert.equal(r.status, 'DEAD');
      assert.match(r.last_error, /target refused/);
    }
    assert.match(
      rows.find((r) => r.webhook_id === named.json.id)?.last_error ?? '',
      /resolves to a loopback address/,
    );

    // With the allowance (tests, development) the same deliveries go through, the named one via the guard's own resolver.
    await lax.tdb.db.query(
      `UPDATE admin_webhook_deliveries SET status = 'PENDING', attempts = 0, next_attempt_at = now() - interval '1 minute'`,
    );
    const allowed = new Dispatcher({
      db: lax.tdb.db,
      keys: lax.keys,
      log: createLogger('silent'),
      now: () => clock,
      targets: new TargetGuard({ lookup: toLoopback, allowPrivateTargets: true }),
    });
    await allowed.tick();
    await allowed.stop();
    assert.deepEqual(hits.sort(), ['/literal', '/named']);
    const t = await admin('POST', `/v1/webhooks/${literal.json.id}:test`);
    assert.equal(t.json.delivered, true, t.text);
    // ... and :test on the strict core refuses the same kind of target without a request.
    const sAdmin = strict.as('admin');
    const made = await sAdmin('POST', '/v1/webhooks', {
      json: { url: 'http://unresolvable.invalid/x', events: ['order.placed'] },
      headers: key(),
    });
    assert.equal(made.status, 201, 'a name that does not resolve now is accepted and checked at delivery');
    await strict.tdb.db.query('UPDATE admin_webhooks SET url = $2 WHERE id = $1', [
      made.json.id,
      `${receiver.origin}/sneaky`,
    ]);
    const before = hits.length;
    const st = await sAdmin('POST', `/v1/webhooks/${made.json.id}:test`);
    assert.equal(st.json.delivered, false);
    assert.match(st.json.error, /target refused/);
    assert.equal(hits.length, before);
  });
});
