/**
 * Issue 23 item 7, the proof on one machine: `migrate` once, then two cores and two edges as
 * separate OS processes in production mode (same secrets, SMS through a receiver of this test's
 * own) behind a gateway process spreading over them, and then:
 * - a customer enrols, logs in, steps up, transfers and confirms with requests landing on both
 *   cores and both edges;
 * - a session revoked through one core is refused by both edges; a signed-request nonce used
 *   through one edge is refused by the other; an admin rate limit counts across the cores;
 * - a core whose EDGE_SHARED_SECRET differs from the edge's refuses the edge's identity headers,
 *   and a core rotating the secret (the edge's value as EDGE_SHARED_SECRET_PREVIOUS) accepts them;
 * - SIGKILL of one core and one edge while transfers run loses no committed transfer and posts
 *   nothing twice, and the survivors keep serving; SIGTERM of a core during transfers leaves each
 *   transfer whole (posted with all its legs, or not posted);
 * - every outbox message reaches the webhook receiver (by webhook-id) with two dispatchers
 *   running; every ledger invariant holds and every audit chain verifies; with every edge down
 *   the gateway answers 503 authz_unavailable and forwards nothing.
 *
 * Production has no demo seed, and `npm run bootstrap` creates only the platform operator's
 * tenant: a customer-facing tenant's core client, settlement account, fee and limit schedules and
 * an Admin service token of its own have no production path yet, so they are written test-side
 * with the project's own seed and store functions (core/ledger/seed.ts, core/admin/seed.ts,
 * core/platform/service-tokens.ts), before the services start.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID, sign } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { Agent } from 'undici';
import { newWebhookSecret } from '../../core/admin/webhooks/sign.ts';
import { adminSeeder } from '../../core/admin/seed.ts';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { ledgerSeeder } from '../../core/ledger/seed.ts';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import type { CheckResponse } from '../../edge/types.ts';
import { signRequest } from '../../shared/api-key-signing.ts';
import { verifyChain } from '../../shared/audit.ts';
import { freePort } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { checkClient, envoyRequest } from '../helpers/edge.ts';
import { call, serve, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Journey } from '../helpers/journey.ts';
import {
  edgeEnv,
  migrateAsOperator,
  productionEnv,
  runService,
  until,
  untilServing,
  type Service,
} from '../helpers/services.ts';

const tenantId = 'proof';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A receiver of Standard-Webhooks-signed POSTs on 127.0.0.1, verifying each and keeping one copy per webhook-id. */
async function receiver(secret: string) {
  const wh = new Webhook(secret.slice('whsec_'.length));
  const byId = new Map<string, Record<string, unknown>>();
  let forged = 0;
  const s = await serve(
    createServer((req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        try {
          const payload = wh.verify(
            Buffer.concat(chunks).toString(),
            req.headers as Record<string, string>,
          ) as Record<string, unknown>;
          byId.set(String(req.headers['webhook-id']), payload);
          res.writeHead(204).end();
        } catch {
          forged++;
          res.writeHead(400).end();
        }
      });
    }),
  );
  return { url: `${s.origin}/hook`, byId, forged: () => forged, close: s.close };
}

/** Codes from the SMS receiver: the newest code sent to `phone` that was not handed out yet. */
function codesFrom(sms: Awaited<ReturnType<typeof receiver>>) {
  const used = new Set<string>();
  return (phone: string) =>
    until(
      async () => {
        const fresh = [...sms.byId.entries()].filter(
          ([id, m]) => !used.has(id) && m.to === phone && /\b\d{6}\b/.test(String(m.text)),
        );
        const last = fresh.at(-1);
        if (!last) return undefined;
        for (const [id] of fresh) used.add(id);
        return /\b(\d{6})\b/.exec(String(last[1].text))?.[1];
      },
      15_000,
      `an SMS code for ${phone}`,
    );
}

/** Prometheus counts of core's request histogram, summed over the series `pick` accepts. */
async function served(origin: string, pick: (labels: string) => boolean): Promise<number> {
  const r = await call(origin, 'GET', '/v1/metrics');
  let n = 0;
  for (const m of r.text.matchAll(/^http_request_duration_seconds_count\{([^}]*)\} (\d+)/gm))
    if (pick(m[1] ?? '')) n += Number(m[2]);
  return n;
}

/** Decisions an edge logged (debug level) for paths `pick` accepts. */
function decided(edge: Service, pick: (path: string) => boolean): number {
  return edge
    .output()
    .split('\n')
    .filter((l) => l.includes('"msg":"decision"'))
    .filter((l) => pick(String(/"path":"([^"]*)"/.exec(l)?.[1]))).length;
}

const allowed = (r: CheckResponse) => r.status.code === 0;

describe('two cores and two edges as production services, under SIGKILL and SIGTERM', {
  timeout: 300_000,
}, () => {
  let tdb: TestDb;
  let env: Record<string, string>;
  let sms: Awaited<ReturnType<typeof receiver>>;
  let hooks: Awaited<ReturnType<typeof receiver>>;
  const hookSecret = newWebhookSecret();
  const procs: Record<string, Service> = {};
  const ports: Record<string, number> = {};
  let gw = '';
  let adminToken = '';
  let settlement = '';
  let j: Journey;
  let alice: Customer;
  let bob: Customer;
  /** Customers paying Bob under load. */
  const senders: Customer[] = [];
  const payees = new Map<string, string>();
  /** Transfers answered 200 on create, and those answered 200 POSTED on confirm. */
  const created = new Set<string>();
  const confirmed = new Set<string>();
  let outboxBefore: Set<string>;

  const core = (name: string) => `http://127.0.0.1:${ports[`core${name}`]}`;

  /** Through the gateway; a 503 authz_unavailable (the request was never forwarded) is retried, as a client would. */
  const viaGateway: typeof call = async (origin, method, path, opts = {}) => {
    for (let n = 1; ; n++) {
      const r = await call(origin, method, path, opts);
      if (n >= 30 || !(r.status === 503 && /authz_unavailable/i.test(String(r.json?.code)))) return r;
      await sleep(25 * n);
    }
  };
  const admin = (
    method: string,
    path: string,
    json?: unknown,
    extra: Record<string, string> = {},
    dispatcher?: Agent,
  ) =>
    viaGateway(gw, method, path, {
      ...(json === undefined ? {} : { json }),
      ...(dispatcher ? { dispatcher } : {}),
      headers: {
        authorization: `Bearer ${adminToken}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `adm-${randomUUID()}`,
        ...extra,
      },
    });

  function start(name: string, kind: 'core' | 'edge', extra: Record<string, string> = {}): Service {
    const own =
      kind === 'edge'
        ? // The edge is given only what it reads: never the master key or the SMS secret.
          {
            ...edgeEnv(env),
            AUTHZ_PORT: String(ports[`authz${name}`]),
            EDGE_METRICS_PORT: String(ports[`metrics${name}`]),
            LOG_LEVEL: 'debug',
          }
        : { ...env, CORE_PORT: String(ports[`core${name}`]) };
    procs[`${kind}${name}`] = runService(kind, { ...own, ...extra });
    return procs[`${kind}${name}`] as Service;
  }

  const ready = (origin: string, path: string, service?: Service) =>
    untilServing(origin, path, 90_000, procs, service);

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    for (const p of [
      'coreA',
      'coreB',
      'coreC',
      'coreD',
      'authzA',
      'authzB',
      'metricsA',
      'metricsB',
      'gateway',
    ])
      ports[p] = await freePort();
    const smsSecret = newWebhookSecret();
    sms = await receiver(smsSecret);
    hooks = await receiver(hookSecret);
    env = { ...productionEnv(tdb.url, sms.url), SMS_WEBHOOK_SECRET: smsSecret };

    await migrateAsOperator(tdb.url);

    // Test-side bootstrap with the project's own seeders (there is no `npm run bootstrap` yet).
    // The ledger's currencies, as a core loads them before it serves (issue 21 item 2).
    await loadLedgerCurrencies(tdb.db);
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, 'Proof Mobile Money', 'KE', 'KES')`,
      [tenantId],
    );
    const ledger = await ledgerSeeder({ db: tdb.db, tenantId, previous: {} });
    await adminSeeder({ db: tdb.db, tenantId, previous: {} });
    adminToken = await putServiceToken(tdb.db, tenantId, 'proof-admin', ['admin']);
    settlement = (ledger.settlementAccounts as Record<string, string>).KES ?? '';

    start('A', 'core');
    start('B', 'core');
    // A core whose secret is not the edge's: it must refuse the edge's identity headers.
    start('D', 'core', { EDGE_SHARED_SECRET: randomBytes(32).toString('base64url') });
    start('A', 'edge');
    start('B', 'edge');
    // Core C (started later) is listed already: until it answers, the gateway skips it.
    procs.gateway = runService('gateway', {
      MODE: 'production',
      GATEWAY_PORT: String(ports.gateway),
      AUTHZ_ADDRESSES: `127.0.0.1:${ports.authzA},127.0.0.1:${ports.authzB}`,
      CORE_ORIGINS: ['A', 'B', 'C'].map(core).join(','),
    });
    gw = `http://127.0.0.1:${ports.gateway}`;
    await Promise.all([
      ready(core('A'), '/v1/ready', procs.coreA),
      ready(core('B'), '/v1/ready', procs.coreB),
      ready(core('D'), '/v1/ready', procs.coreD),
      ready(`http://127.0.0.1:${ports.metricsA}`, '/ready', procs.edgeA),
      ready(`http://127.0.0.1:${ports.metricsB}`, '/ready', procs.edgeB),
    ]);
    await untilServing(gw, '/v1/ready', 30_000, procs, procs.gateway);

    outboxBefore = new Set(
      (await tdb.db.query<{ id: string }>('SELECT id FROM outbox')).rows.map((r) => r.id),
    );
    const hook = await admin('POST', '/v1/webhooks', { url: hooks.url, events: ['*'], secret: hookSecret });
    assert.equal(
      hook.status,
      201,
      `a loopback receiver listed in PRIVATE_TARGETS_ALLOWED is accepted (${hook.text})`,
    );
    j = journey(
      gw,
      codesFrom(sms),
      tdb.db,
      {
        coreClient: ledger.coreClient as { clientId: string; clientSecret: string },
        settlementAccounts: { KES: settlement },
      },
      { tenantId, call: viaGateway },
    );
  });

  after(async () => {
    for (const p of Object.values(procs))
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await Promise.all(Object.values(procs).map((p) => p.exited));
    await sms?.close();
    await hooks?.close();
    await tdb?.drop();
  });

  it('a customer enrols, logs in, steps up, transfers and confirms; both cores and both edges served it', async () => {
    alice = await j.signUp('+254733000001');
    bob = await j.signUp('+254733000002');
    const payee = await j.addPayee(alice, bob.phone, 'Bob');
    assert.equal(payee.status, 201, payee.text);
    payees.set(alice.phone, payee.json.id);
    await j.fund(alice.wallet, '20000.00');
    const t = await j.transfer(alice, payee.json.id, '1000.00', 'otp');
    assert.equal(t.first.json?.code, 'MFA_REQUIRED');
    assert.equal(t.final.status, 200, t.final.text);
    created.add(t.final.json.id);
    const confirm = await viaGateway(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(confirm.status, 200, confirm.text);
    assert.equal(confirm.json.status, 'POSTED');
    confirmed.add(t.final.json.id);

    const journeyRoute = (labels: string) =>
      /route="\/(customers|v1\/(transfers|beneficiaries|accounts))/.test(labels);
    for (const name of ['A', 'B'])
      assert.ok((await served(core(name), journeyRoute)) > 0, `core ${name} served journey requests`);
    const journeyPath = (p: string) => /^\/(customers|v1\/(transfers|beneficiaries|accounts))/.test(p);
    for (const name of ['A', 'B'])
      assert.ok(
        decided(procs[`edge${name}`] as Service, journeyPath) > 0,
        `edge ${name} decided journey requests`,
      );
    assert.ok(sms.byId.size >= 4 && sms.forged() === 0, 'codes came signed through the SMS receiver');
  });

  it('a session revoked through one core is refused by both edges', async () => {
    const login = await viaGateway(gw, 'POST', '/customers/auth/login', {
      json: { tenantId, phone: bob.phone, pin: '4826' },
      headers: { 'x-device-id': bob.device },
    });
    assert.equal(login.status, 200, login.text);
    const probe = envoyRequest('GET', '/v1/accounts', {
      headers: { authorization: `Bearer ${login.json.accessToken}`, 'x-device-id': bob.device },
    });
    const edges = [ports.authzA, ports.authzB].map((p) => checkClient(`127.0.0.1:${p}`));
    try {
      for (const e of edges)
        await until(
          async () => (allowed(await e.check(probe)) ? true : undefined),
          10_000,
          'both edges accept the new session',
        );
      const out = await viaGateway(gw, 'POST', '/customers/auth/logout', {
        json: {},
        headers: { authorization: `Bearer ${login.json.accessToken}`, 'x-device-id': bob.device },
      });
      assert.equal(out.status, 204, out.text);
      for (const e of edges) {
        const refused = await until(
          async () => {
            const r = await e.check(probe);
            return allowed(r) ? undefined : r;
          },
          10_000,
          'the edge refuses the revoked session',
        );
        assert.equal(refused.denied_response?.status.code, 401);
      }
      const through = await viaGateway(gw, 'GET', '/v1/accounts', {
        headers: { authorization: `Bearer ${login.json.accessToken}`, 'x-device-id': bob.device },
      });
      assert.equal(through.status, 401);
    } finally {
      for (const e of edges) e.close();
    }
  });

  it('a signed-request nonce used through one edge is refused through the other', async () => {
    const made = await admin('POST', '/api-keys', { name: 'proof-reader', scopes: ['core:read'] });
    assert.equal(made.status, 201, made.text);
    const path = `/v1/core/accounts/${settlement}`;
    const signed = (nonce?: string) =>
      envoyRequest('GET', path, {
        headers: {
          'x-request-id': randomUUID(),
          ...signRequest({
            method: 'GET',
            path,
            keyId: made.json.id,
            secret: made.json.secret,
            ...(nonce ? { nonce } : {}),
          }),
        },
      });
    const [a, b] = [ports.authzA, ports.authzB].map((p) => checkClient(`127.0.0.1:${p}`)) as [
      ReturnType<typeof checkClient>,
      ReturnType<typeof checkClient>,
    ];
    try {
      const once = signed();
      assert.ok(allowed(await a.check(once)), 'edge A accepts the signed request');
      const replay = await b.check(once);
      assert.equal(allowed(replay), false, 'edge B refuses the same nonce');
      assert.equal(replay.denied_response?.status.code, 401);
      assert.ok(allowed(await b.check(signed())), 'edge B accepts a fresh nonce of the same key');
      assert.equal(allowed(await a.check(once)), false, 'and edge A refuses its own nonce again');
    } finally {
      a.close();
      b.close();
    }
  });

  it("a core with another EDGE_SHARED_SECRET refuses the edge's identity headers; a core rotating it accepts them", async () => {
    const e = checkClient(`127.0.0.1:${ports.authzA}`);
    try {
      const asked = { authorization: `Bearer ${adminToken}`, 'x-request-id': randomUUID() };
      const decision = await e.check(envoyRequest('GET', '/v1/webhooks', { headers: asked }));
      assert.ok(allowed(decision));
      const removed = new Set(decision.ok_response?.headers_to_remove ?? []);
      const forwarded: Record<string, string> = Object.fromEntries(
        Object.entries(asked).filter(([k]) => !removed.has(k)),
      );
      for (const h of decision.ok_response?.headers ?? []) forwarded[h.header.key] = h.header.value;
      assert.equal(
        (await call(core('A'), 'GET', '/v1/webhooks', { headers: forwarded })).status,
        200,
        "a core with the edge's secret serves it",
      );
      const refused = await call(core('D'), 'GET', '/v1/webhooks', { headers: forwarded });
      assert.ok(
        refused.status === 401 || refused.status === 403,
        `core D refuses (${refused.status} ${refused.text})`,
      );
      procs.coreD?.child.kill('SIGTERM');
      assert.equal(await procs.coreD?.exited, 0);

      // Core C rotates: a new secret of its own, the edge's (old) one still accepted as the previous.
      start('C', 'core', {
        EDGE_SHARED_SECRET: randomBytes(32).toString('base64url'),
        EDGE_SHARED_SECRET_PREVIOUS: env.EDGE_SHARED_SECRET ?? '',
      });
      await ready(core('C'), '/v1/ready', procs.coreC);
      assert.equal(
        (await call(core('C'), 'GET', '/v1/webhooks', { headers: forwarded })).status,
        200,
        'the previous secret is accepted while it rotates',
      );
    } finally {
      e.close();
    }
  });

  it('an admin rate limit counts across the cores', async () => {
    // A source address of its own (127.0.0.2), so this is the only traffic in its per-address window.
    for (let attempt = 2; attempt < 6; attempt++) {
      const from = new Agent({ localAddress: `127.0.0.${attempt}` });
      const window = Math.floor(Date.now() / 60_000);
      const was = await Promise.all(
        ['A', 'B', 'C'].map((n) =>
          served(core(n), (l) => l.includes('route="/v1/products"') && l.includes('status="201"')),
        ),
      );
      const statuses: number[] = [];
      const queue = Array.from({ length: 130 }, (_, i) => i);
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
            const r = await admin(
              'POST',
              '/v1/products',
              { code: `RL${attempt}_${i}`, category: 'TEST' },
              {},
              from,
            );
            statuses.push(r.status);
            if (r.status === 429) assert.equal(r.json?.code, 'RATE_LIMITED');
          }
        }),
      );
      await from.close();
      // Windows are fixed minutes: a burst that straddled two is repeated from a fresh address.
      if (Math.floor(Date.now() / 60_000) !== window) continue;
      const now = await Promise.all(
        ['A', 'B', 'C'].map((n) =>
          served(core(n), (l) => l.includes('route="/v1/products"') && l.includes('status="201"')),
        ),
      );
      const perCore = now.map((v, i) => v - (was[i] ?? 0));
      assert.equal(
        statuses.filter((s) => s === 201).length,
        120,
        `exactly the limit was accepted (${JSON.stringify(perCore)})`,
      );
      assert.equal(statuses.filter((s) => s === 429).length, 10);
      assert.ok(
        (perCore[0] ?? 0) > 0 && (perCore[1] ?? 0) > 0,
        `cores A and B both accepted some (${JSON.stringify(perCore)})`,
      );
      return;
    }
    assert.fail('every burst straddled a minute boundary');
  });

  /** Retry what got no definite answer (the gateway's 502/503/504 while an instance died). */
  async function persist(send: () => Promise<Res>): Promise<Res> {
    for (let n = 1; ; n++) {
      const r = await send();
      if (n >= 40 || ![502, 503, 504].includes(r.status)) return r;
      await sleep(100);
    }
  }

  /** One request that may need a device step-up, repeated from the start when a lost answer used up the step-up. */
  async function stepped(
    c: Customer,
    path: string,
    body: unknown,
    extra: Record<string, string>,
  ): Promise<Res> {
    let last: Res | undefined;
    for (let round = 0; round < 5; round++) {
      const first = await persist(() =>
        viaGateway(gw, 'POST', path, { json: body, headers: { ...j.bearer(c), ...extra } }),
      );
      if (!(first.status === 403 && first.json?.code === 'MFA_REQUIRED')) return first;
      const challenge = String(first.json.challenge);
      const up = await persist(() =>
        viaGateway(gw, 'POST', '/customers/auth/stepup/complete', {
          json: {
            challengeToken: challenge,
            deviceAssertion: {
              deviceId: c.deviceId,
              signature: sign(null, Buffer.from(challenge), c.key).toString('base64url'),
            },
          },
          headers: j.bearer(c),
        }),
      );
      if (up.status !== 200) continue;
      last = await persist(() =>
        viaGateway(gw, 'POST', path, {
          json: body,
          headers: { ...j.bearer(c, up.json.accessToken), ...extra },
        }),
      );
      if (!(last.status === 403 || last.status === 401)) return last;
    }
    return last ?? assert.fail(`no answer for ${path}`);
  }

  /** Create and confirm a transfer; `beforeConfirm` runs when the confirm is about to be sent. */
  async function pay(c: Customer, amount: string, beforeConfirm?: () => void): Promise<string> {
    const body = {
      amount,
      currency: 'KES',
      beneficiaryId: payees.get(c.phone) ?? '',
      reference: `load-${randomUUID().slice(0, 8)}`,
    };
    const made = await stepped(c, '/v1/transfers', body, {
      ...j.intent(c, body, JSON.stringify(body)),
      'idempotency-key': `tr-${randomUUID()}`,
    });
    assert.equal(made.status, 200, made.text);
    created.add(made.json.id);
    beforeConfirm?.();
    const done = await stepped(
      c,
      '/v1/transfers/confirm',
      { transferId: made.json.id },
      { 'idempotency-key': `cf-${randomUUID()}` },
    );
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.status, 'POSTED');
    confirmed.add(made.json.id);
    return made.json.id;
  }

  it('SIGKILL of one core and one edge while transfers run: nothing committed is lost, nothing posts twice, the survivors serve', async () => {
    const carol = await j.signUp('+254733000003');
    const dave = await j.signUp('+254733000004');
    for (const c of [carol, dave]) {
      const p = await j.addPayee(c, bob.phone);
      assert.equal(p.status, 201, p.text);
      payees.set(c.phone, p.json.id);
      await j.fund(c.wallet, '20000.00');
    }
    senders.push(alice, carol, dave);
    let confirms = 0;
    let killed = false;
    const afterKill = new Map<string, number>();
    // The kill lands as the fourth confirm is sent, with the other senders' requests under way.
    const kill = () => {
      if (killed || ++confirms < 4) return;
      killed = true;
      procs.coreB?.child.kill('SIGKILL');
      procs.edgeB?.child.kill('SIGKILL');
    };
    await Promise.all(
      senders.map(async (c) => {
        while (!killed || (afterKill.get(c.phone) ?? 0) < 2) {
          const startedAfterKill = killed;
          await pay(c, '150.00', kill);
          if (startedAfterKill) afterKill.set(c.phone, (afterKill.get(c.phone) ?? 0) + 1);
        }
      }),
    );
    assert.equal(await procs.coreB?.exited, null, 'core B was killed');
    assert.equal(await procs.edgeB?.exited, null, 'edge B was killed');
    await assertTransfersWhole();
  });

  it('SIGTERM of a core during transfers: each transfer is posted whole or not at all, and the core exits cleanly', async () => {
    let confirming!: () => void;
    const confirmSent = new Promise<void>((r) => {
      confirming = r;
    });
    assert.equal(senders.length, 3);
    const running = Promise.all(senders.map((c) => pay(c, '120.00', confirming)));
    await Promise.race([confirmSent, running]);
    procs.coreA?.child.kill('SIGTERM');
    await running;
    assert.equal(await procs.coreA?.exited, 0, 'core A drained and exited 0');
    await assertTransfersWhole();
    // Core C serves on alone.
    await pay(alice, '110.00');
  });

  it('every outbox message reached the webhook receiver, and every ledger invariant and audit chain holds', async () => {
    const pending = async () => {
      const { rows } = await tdb.db.query<{
        id: string;
        status: string;
        headers: Record<string, string> | null;
      }>('SELECT id, status, headers FROM outbox');
      const wanted = rows.filter((r) => !outboxBefore.has(r.id) && r.headers?.['content-class'] !== 'secret');
      return { wanted, missing: wanted.filter((r) => !hooks.byId.has(`msg_${r.id}`)) };
    };
    // The receiver sees a delivery before the dispatcher records it: wait for both.
    const recorded = async () =>
      (await tdb.db.query(`SELECT 1 FROM admin_webhook_deliveries WHERE status <> 'DELIVERED'`)).rowCount ===
      0;
    const { wanted } = await until(
      async () => {
        const p = await pending();
        return p.missing.length === 0 && (await recorded()) ? p : undefined;
      },
      60_000,
      'every outbox message at the receiver, recorded as delivered',
    );
    assert.ok(wanted.length > 20, `events were produced (${wanted.length})`);
    const events = new Set([...hooks.byId.values()].map((p) => String(p.type)));
    for (const e of ['transfer.created', 'transfer.completed', 'session.revoked'])
      assert.ok(events.has(e), `${e} delivered`);
    assert.equal(hooks.forged(), 0);
    const known = new Set(wanted.map((r) => `msg_${r.id}`));
    assert.deepEqual(
      [...hooks.byId.keys()].filter((id) => !known.has(id)),
      [],
      'nothing delivered that the outbox did not hold',
    );
    const dead = await tdb.db.query(`SELECT 1 FROM admin_webhook_deliveries WHERE status <> 'DELIVERED'`);
    assert.equal(dead.rowCount, 0, 'every delivery recorded as delivered');

    const db = tdb.db;
    const totals = await db.query<{ currency: string; net: string }>(
      `SELECT currency, sum(credits_posted - debits_posted)::text AS net FROM ledger_balances GROUP BY currency`,
    );
    for (const r of totals.rows) assert.equal(Number(r.net), 0, `balances in ${r.currency} sum to zero`);
    const drift = await db.query(
      `SELECT b.account_id FROM ledger_balances b
        WHERE (b.credits_posted - b.debits_posted) <> coalesce((SELECT sum(CASE side WHEN 'credit' THEN amount ELSE -amount END) FROM ledger_entries e WHERE e.tenant_id = b.tenant_id AND e.account_id = b.account_id), 0)
           OR b.pending_debits <> coalesce((SELECT sum(amount) FROM ledger_holds h WHERE h.tenant_id = b.tenant_id AND h.debit_account_id = b.account_id AND h.status = 'pending'), 0)`,
    );
    assert.equal(drift.rowCount, 0, 'each balance equals its entries and its pending holds');
    const unbalanced = await db.query(
      `SELECT posting_id FROM ledger_entries GROUP BY tenant_id, posting_id, currency HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0`,
    );
    assert.equal(unbalanced.rowCount, 0, 'each posting balances');
    const tenants = await db.query<{ tenant_id: string }>('SELECT DISTINCT tenant_id FROM audit_log');
    assert.ok(tenants.rows.some((t) => t.tenant_id === tenantId));
    for (const t of tenants.rows) {
      const report = await verifyChain(db, t.tenant_id);
      // A break says which rows surround it (token issuance once appended outside a transaction).
      const around = report.ok
        ? []
        : (
            await db.query<{ line: string }>(
              `SELECT id || ' ' || action || ' ' || (actor->>'type') || ':' || (actor->>'id') || ' prev=' ||
                      left(encode(prev_hash, 'hex'), 8) || ' hash=' || left(encode(row_hash, 'hex'), 8) || ' ' || ts AS line
                 FROM audit_log WHERE tenant_id = $1 AND id BETWEEN $2 - 6 AND $2 + 2 ORDER BY id`,
              [t.tenant_id, report.brokenAt ?? 0],
            )
          ).rows.map((r) => r.line);
      assert.ok(report.ok, `audit chain of ${t.tenant_id}: ${JSON.stringify(report)}\n${around.join('\n')}`);
    }
    const secrets = [
      adminToken,
      env.MASTER_KEY,
      env.EDGE_SHARED_SECRET,
      ...[...sms.byId.values()].map((m) => String(m.text)),
    ];
    for (const [name, p] of Object.entries(procs))
      for (const s of secrets)
        assert.ok(!p.output().includes(s ?? '-'), `${name} logged no secret or SMS text`);
  });

  it('with every edge down the gateway answers 503 authz_unavailable and forwards nothing', async () => {
    procs.edgeA?.child.kill('SIGTERM');
    assert.equal(await procs.edgeA?.exited, 0);
    const forwarded = () => served(core('C'), (l) => !l.includes('route="/v1/metrics"'));
    const before = await forwarded();
    for (const path of ['/v1/accounts', '/v1/health']) {
      const r = await call(gw, 'GET', path, { headers: j.bearer(alice) });
      assert.equal(r.status, 503, r.text);
      assert.equal(String(r.json?.code).toLowerCase(), 'authz_unavailable');
    }
    assert.equal(await forwarded(), before, 'core saw none of them');
    for (const name of ['gateway', 'coreC']) procs[name]?.child.kill('SIGTERM');
    assert.deepEqual(await Promise.all([procs.gateway?.exited, procs.coreC?.exited]), [0, 0]);
  });

  /** Every transfer answered 200 exists; every POSTED one is in the ledger once per hold; nothing else is. */
  async function assertTransfersWhole(): Promise<void> {
    const { rows } = await tdb.db.query<{
      id: string;
      status: string;
      holds: string[];
      posting_ids: string[];
      postings: string[];
    }>(
      `SELECT t.id, t.status, array_remove(ARRAY[t.amount_hold_id, t.fee_hold_id], NULL)::text[] AS holds, t.posting_ids::text[] AS posting_ids,
              coalesce((SELECT array_agg(p.id::text ORDER BY p.id) FROM ledger_postings p WHERE p.tenant_id = t.tenant_id AND p.hold_id IN (t.amount_hold_id, t.fee_hold_id)), '{}') AS postings
         FROM transfers t WHERE t.tenant_id = $1`,
      [tenantId],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const id of created) assert.ok(byId.has(id), `transfer ${id} answered 200 exists`);
    for (const r of rows) {
      if (r.status === 'POSTED') {
        assert.equal(r.postings.length, r.holds.length, `transfer ${r.id}: one posting per hold`);
        assert.deepEqual(
          [...r.posting_ids].sort(),
          r.postings,
          `transfer ${r.id} lists exactly its postings`,
        );
      } else {
        assert.equal(r.postings.length, 0, `transfer ${r.id} (${r.status}) posted nothing`);
      }
    }
    assert.deepEqual(
      rows
        .filter((r) => r.status === 'POSTED')
        .map((r) => r.id)
        .sort(),
      [...confirmed].sort(),
      'posted = confirmed with a 200',
    );
    const orphans = await tdb.db.query(
      `SELECT p.id FROM ledger_postings p WHERE p.tenant_id = $1 AND p.kind = 'capture'
          AND NOT EXISTS (SELECT 1 FROM transfers t WHERE t.tenant_id = p.tenant_id AND t.status = 'POSTED' AND p.id = ANY(t.posting_ids))`,
      [tenantId],
    );
    assert.equal(orphans.rowCount, 0, 'no capture posting without its posted transfer');
  }
});
