/** Production SMS through the operator's gateway: signed, retried, guarded, nothing logged. */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { newWebhookSecret } from '../../core/admin/webhooks/sign.ts';
import { TargetGuard } from '../../core/admin/webhooks/target.ts';
import { parseCidr } from '../../shared/ip-ranges.ts';
import { webhookSmsSender } from '../../core/identity/sms-webhook.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { serve } from '../helpers/http.ts';

const q = {} as Queryable;
const msg = {
  tenantId: 't1',
  to: '+254700123456',
  code: '482913',
  text: 'Your code is 482913',
  purpose: 'verify',
};

describe('SMS through the operator gateway', () => {
  const received: { headers: IncomingHttpHeaders; body: string }[] = [];
  let failFirst = 0;
  let origin: string;
  let close: () => Promise<void>;
  let logged = '';
  const log = createLogger(
    'info',
    new Writable({
      write(chunk, _e, cb) {
        logged += String(chunk);
        cb();
      },
    }),
  );

  before(async () => {
    const s = await serve(
      createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          received.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
          res.writeHead(failFirst-- > 0 ? 503 : 204);
          res.end();
        });
      }),
    );
    origin = s.origin;
    close = s.close;
  });
  after(() => close());

  it('posts {to, text, purpose, id} signed the Standard Webhooks way, retrying a failing gateway with one webhook-id', async () => {
    const secret = newWebhookSecret();
    failFirst = 2;
    received.length = 0;
    const sender = webhookSmsSender({
      url: new URL('/sms', origin),
      secret,
      guard: new TargetGuard({ allowedCidrs: ['127.0.0.0/8'] }),
      log,
    });
    await sender.send(q, msg, Date.now());
    await sender.idle();
    assert.equal(received.length, 3, 'two 503s, then delivered');
    assert.equal(
      new Set(received.map((r) => r.headers['webhook-id'])).size,
      1,
      'a retry is the same message',
    );
    const last = received[2]!;
    const payload = new Webhook(secret.slice('whsec_'.length)).verify(
      last.body,
      last.headers as Record<string, string>,
    ) as Record<string, unknown>;
    assert.deepEqual(Object.keys(payload).sort(), ['id', 'purpose', 'text', 'to']);
    assert.equal(payload.to, msg.to);
    assert.equal(payload.id, last.headers['webhook-id']);
    assert.ok(
      !logged.includes(msg.code) && !logged.includes(msg.to),
      'neither the code nor the phone is logged',
    );
  });

  it('refuses a loopback gateway unless the operator lists it, and never a metadata address', async () => {
    received.length = 0;
    const sender = webhookSmsSender({
      url: new URL('/sms', origin),
      secret: newWebhookSecret(),
      guard: new TargetGuard(),
      log,
    });
    await sender.send(q, msg, Date.now());
    await sender.idle();
    assert.equal(received.length, 0);
    assert.match(logged, /SMS gateway target refused/);
    assert.ok(!logged.includes(msg.code));
    const listed = new TargetGuard({ allowedCidrs: ['169.254.0.0/16', '10.0.0.0/8'] });
    assert.equal(listed.refusalOf('169.254.169.254'), 'metadata');
    assert.equal(listed.refusalOf('10.1.2.3'), undefined);
    assert.equal(listed.refusalOf('192.168.1.1'), 'private');
  });

  it('reads CIDRs and refuses what is not one', () => {
    assert.deepEqual(parseCidr('10.0.0.0/8'), { address: '10.0.0.0', prefix: 8, family: 'ipv4' });
    assert.deepEqual(parseCidr('fd00::/8'), { address: 'fd00::', prefix: 8, family: 'ipv6' });
    assert.deepEqual(parseCidr('127.0.0.1'), { address: '127.0.0.1', prefix: 32, family: 'ipv4' });
    for (const bad of ['10.0.0.0/33', 'x/8', '10.0.0.0/', '::/129', ''])
      assert.equal(parseCidr(bad), undefined, bad);
    assert.throws(() => new TargetGuard({ allowedCidrs: ['nope'] }));
  });
});
