import assert from 'node:assert/strict';
import { randomUUID, sign } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { intentPayload } from '../../core/payments/transfers.ts';
import { origOf } from '../../shared/challenge.ts';
import { localHour } from '../../shared/local-hour.ts';
import type { TestDb } from '../helpers/db.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Attacks on issue 20 item 3's delegated payer transfers through the dev gateway, as an outsider
 * would send them: the payer named where the edge does not look (a duplicate key, a body that is
 * not labelled JSON, the query string, a long body), replays naming another payer, a confirm
 * naming another owner or sent by someone else. Whatever the trick, the wallet of a customer who
 * delegated nothing never pays, and nothing answers 500.
 */
describe('attacks on delegated payer transfers', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let core: string;
  let j: Journey;
  let adminToken = '';
  /** alice pays for bob (a tuple); mallory pays for nobody; carol is their payee. */
  let alice: Customer;
  let bob: Customer;
  let carol: Customer;
  let mallory: Customer;
  let aliceToCarol = '';
  let malloryToCarol = '';

  const tuples = (op: 'PUT' | 'POST', path: string, json: unknown): Promise<Res> =>
    call(gw, op, path, {
      json,
      headers: {
        authorization: `Bearer ${adminToken}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `tp-${randomUUID()}`,
      },
    });

  /**
   * POST /v1/transfers with exactly `raw` as the body (signed as sent), stepping up with the
   * device when asked; `fields` are what the intent signature covers.
   */
  async function rawTransfer(
    c: Customer,
    fields: { amount: string; currency: string; beneficiaryId: string },
    raw: string,
    opts: { contentType?: string; query?: string; key?: string } = {},
  ): Promise<{ first: Res; final: Res; token: string }> {
    const path = `/v1/transfers${opts.query ?? ''}`;
    const headers = {
      ...j.bearer(c),
      'content-type': opts.contentType ?? 'application/json',
      'idempotency-key': opts.key ?? `at-${randomUUID()}`,
      'x-intent-device-id': c.deviceId,
      'x-intent-signature': sign(
        null,
        Buffer.from(intentPayload({ ...fields, orig: origOf('POST', path, raw) })),
        c.key,
      ).toString('base64url'),
    };
    const first = await call(gw, 'POST', path, { body: raw, headers });
    if (!(first.status === 403 && first.json?.code === 'MFA_REQUIRED'))
      return { first, final: first, token: '' };
    const token = await j.stepUp(c, first.json.challenge, 'device');
    const final = await call(gw, 'POST', path, {
      body: raw,
      headers: { ...headers, authorization: `Bearer ${token}` },
    });
    return { first, final, token };
  }
  /** A transfer stepped up and signed, ready to send at once with others (`fire`). */
  async function armed(c: Customer, beneficiaryId: string, amount: string, payerCustomerId?: string) {
    const f = fieldsOf(beneficiaryId, amount);
    const raw = JSON.stringify({ ...f, ...(payerCustomerId ? { payerCustomerId } : {}) });
    const path = '/v1/transfers';
    const headers = {
      ...j.bearer(c),
      'content-type': 'application/json',
      'idempotency-key': `ar-${randomUUID()}`,
      'x-intent-device-id': c.deviceId,
      'x-intent-signature': sign(
        null,
        Buffer.from(intentPayload({ ...f, orig: origOf('POST', path, raw) })),
        c.key,
      ).toString('base64url'),
    };
    // A tuple just written reaches the edge on NOTIFY, moments after its commit.
    let first = await call(gw, 'POST', path, { body: raw, headers });
    for (const until = Date.now() + 5000; first.json?.code === 'POLICY_DENIED' && Date.now() < until; ) {
      await new Promise((res) => setTimeout(res, 50));
      first = await call(gw, 'POST', path, { body: raw, headers });
    }
    assert.equal(first.json?.code, 'MFA_REQUIRED', first.text);
    const token = await j.stepUp(c, first.json.challenge, 'device');
    return () =>
      call(gw, 'POST', path, { body: raw, headers: { ...headers, authorization: `Bearer ${token}` } });
  }
  const fieldsOf = (beneficiaryId: string, amount = '10.00') => ({
    amount,
    currency: 'KES',
    beneficiaryId,
    reference: `at-${randomUUID().slice(0, 8)}`,
  });
  /** Refused, with a code, and no 5xx. */
  const refused = (r: Res, what: string) => {
    assert.ok(r.status >= 400 && r.status < 500, `${what}: ${r.status} ${r.text}`);
    assert.equal(typeof r.json?.code, 'string', `${what}: ${r.text}`);
  };

  before(async () => {
    e2e = await startE2eStack('atkpayer');
    ({ tdb, gw, core } = e2e);
    const demo = e2e.demo as Demo & { serviceTokens: Record<'admin', { token: string }> };
    adminToken = demo.serviceTokens.admin.token;
    j = journey(gw, e2e.dataDir, tdb.db, demo);
    alice = await j.signUp('+254711410001');
    bob = await j.signUp('+254711410002');
    carol = await j.signUp('+254711410003');
    mallory = await j.signUp('+254711410004');
    aliceToCarol = (await j.addPayee(alice, carol.phone, 'Carol')).json.id;
    malloryToCarol = (await j.addPayee(mallory, carol.phone, 'Carol')).json.id;
    for (const c of [alice, bob, mallory]) await j.fund(c.wallet, '10000.00');
    const t = await tuples('PUT', '/v1/tenants/demo/tuples', {
      subject: { ns: 'customer', id: alice.id },
      relation: 'payer',
      object: { ns: 'customer', id: bob.id },
    });
    assert.equal(t.status, 201, t.text);
  });
  after(() => e2e?.stop());

  it('the payer hidden from the edge (duplicate key, odd content type, long body, query string) never pays', async () => {
    const bobBefore = await j.balance(bob.wallet);
    const f = fieldsOf(malloryToCarol);
    const attempts: [string, string, { contentType?: string; query?: string }][] = [
      [
        'duplicate key, own first',
        `{"amount":"${f.amount}","currency":"KES","beneficiaryId":"${f.beneficiaryId}","reference":"${f.reference}a","payerCustomerId":"${mallory.id}","payerCustomerId":"${bob.id}"}`,
        {},
      ],
      [
        'duplicate key, bob first',
        `{"amount":"${f.amount}","currency":"KES","beneficiaryId":"${f.beneficiaryId}","reference":"${f.reference}b","payerCustomerId":"${bob.id}","payerCustomerId":"${mallory.id}"}`,
        {},
      ],
      [
        'text/plain',
        JSON.stringify({ ...f, reference: `${f.reference}c`, payerCustomerId: bob.id }),
        { contentType: 'text/plain' },
      ],
      [
        'upper-case media type',
        JSON.stringify({ ...f, reference: `${f.reference}d`, payerCustomerId: bob.id }),
        { contentType: 'APPLICATION/JSON' },
      ],
      [
        'vendor json',
        JSON.stringify({ ...f, reference: `${f.reference}e`, payerCustomerId: bob.id }),
        { contentType: 'application/vnd.api+json' },
      ],
      [
        'long body',
        `${' '.repeat(9000)}${JSON.stringify({ ...f, reference: `${f.reference}f`, payerCustomerId: bob.id })}`,
        {},
      ],
      [
        'query string',
        JSON.stringify({ ...f, reference: `${f.reference}g` }),
        { query: `?payerCustomerId=${bob.id}` },
      ],
      [
        'escaped key',
        `{"amount":"${f.amount}","currency":"KES","beneficiaryId":"${f.beneficiaryId}","reference":"${f.reference}h","payerCustomer\\u0049d":"${bob.id}"}`,
        {},
      ],
    ];
    for (const [what, raw, opts] of attempts) {
      const r = await rawTransfer(mallory, f, raw, opts);
      if (r.final.status === 200)
        assert.notEqual(
          r.final.json.payer_customer_id,
          bob.id,
          `${what}: bob's wallet pays: ${r.final.text}`,
        );
      else refused(r.final, what);
    }
    assert.equal(await j.balance(bob.wallet), bobBefore, "bob's wallet never moved");
    const { rows } = await tdb.db.query('SELECT 1 FROM transfers WHERE payer_customer_id = $1', [bob.id]);
    assert.equal(rows.length, 0, 'no transfer from bob was even held');
  });

  it('the payer id spelled otherwise, or not a string, is a clean refusal', async () => {
    for (const payer of [
      bob.id.toUpperCase(),
      ` ${bob.id}`,
      42,
      { id: bob.id },
      [bob.id],
      '',
      'x'.repeat(5000),
      // Lone surrogates (JSON escapes in the body): the policy's JSON parser refuses them, so
      // handed on as they came they failed every Check of the request closed (503).
      '\ud800',
      `${bob.id}\udc00`,
    ]) {
      const f = fieldsOf(malloryToCarol);
      const r = await rawTransfer(mallory, f, JSON.stringify({ ...f, payerCustomerId: payer }));
      refused(r.final, `payer ${JSON.stringify(payer).slice(0, 40)}`);
    }
  });

  it("a replay under the same Idempotency-Key naming another payer moves nothing from that payer's wallet", async () => {
    const key = `at-replay-${randomUUID()}`;
    const f = fieldsOf(aliceToCarol);
    const own = await rawTransfer(alice, f, JSON.stringify(f), { key });
    assert.equal(own.final.status, 200, own.final.text);
    const bobBefore = await j.balance(bob.wallet);
    const swapped = await rawTransfer(alice, f, JSON.stringify({ ...f, payerCustomerId: bob.id }), { key });
    refused(swapped.final, 'same key, other payer');
    assert.equal(await j.balance(bob.wallet), bobBefore);
  });

  it('a delegated transfer is confirmed only by its delegate, naming its owner', async () => {
    const f = fieldsOf(aliceToCarol);
    const created = await rawTransfer(alice, f, JSON.stringify({ ...f, payerCustomerId: bob.id }));
    assert.equal(created.final.status, 200, created.final.text);
    const id = created.final.json.id as string;
    const confirmAs = async (c: Customer, payerCustomerId?: string) => {
      // Each confirmer at AAL 2 (their own step-up).
      const body = { transferId: id, ...(payerCustomerId ? { payerCustomerId } : {}) };
      return j.withStepUp(c, 'POST', '/v1/transfers/confirm', body, {
        'idempotency-key': `cf-${randomUUID()}`,
      });
    };
    refused((await confirmAs(alice)).final, 'confirm without naming the owner');
    refused((await confirmAs(alice, alice.id)).final, 'confirm naming herself');
    refused((await confirmAs(alice, mallory.id)).final, 'confirm naming another');
    refused((await confirmAs(bob, bob.id)).final, 'the owner confirming');
    refused((await confirmAs(mallory, bob.id)).final, 'a third customer confirming');
    refused((await confirmAs(mallory)).final, 'a third customer confirming, no payer');
    const ok = await confirmAs(alice, bob.id);
    assert.equal(ok.final.status, 200, ok.final.text);
    assert.equal(ok.final.json.status, 'POSTED');
    // A third customer's history never shows it.
    const hist = await call(gw, 'GET', '/v1/transactions', { headers: j.bearer(mallory) });
    assert.equal(hist.status, 200, hist.text);
    assert.ok(!hist.json.items.some((t: { id: string }) => t.id === id));
  });

  it("concurrent transfers from one wallet by its owner and two delegates never pass the owner's day limit", async () => {
    const { rows } = await tdb.db.query<{ id: string }>(
      `SELECT id FROM admin_schedules WHERE tenant_id = 'demo' AND kind = 'LIMIT' AND product = 'TRANSFER' AND status = 'ACTIVE'`,
    );
    assert.ok(rows[0]);
    await tdb.db.query(
      `INSERT INTO admin_schedule_limits (id, tenant_id, schedule_id, action, period, max_amount, kyc_level) VALUES ($1, 'demo', $2, 'TRANSFER', 'day', 100, '2')`,
      [randomUUID(), rows[0].id],
    );
    const owner = await j.signUp('+254711410005');
    await j.fund(owner.wallet, '5000.00');
    await tdb.db.query(
      `INSERT INTO kyc_profiles (tenant_id, customer_id, level, status, full_name, id_type, id_number, date_of_birth, registered_by, expires_at, created_at, updated_at)
       VALUES ('demo', $1, 2, 'ACTIVE', 'Owner Person', 'NATIONAL_ID', 'KYC-ATK-2', '1990-01-01', $2, now() + interval '1 year', now(), now())`,
      [owner.id, randomUUID()],
    );
    const ownerToCarol = (await j.addPayee(owner, carol.phone)).json.id as string;
    for (const d of [alice, mallory]) {
      const t = await tuples('PUT', '/v1/tenants/demo/tuples', {
        subject: { ns: 'customer', id: d.id },
        relation: 'payer',
        object: { ns: 'customer', id: owner.id },
      });
      assert.equal(t.status, 201, t.text);
    }
    const fires = [
      await armed(owner, ownerToCarol, '60.00'),
      await armed(alice, aliceToCarol, '60.00', owner.id),
      await armed(mallory, malloryToCarol, '60.00', owner.id),
    ];
    const answers = await Promise.all(fires.map((f) => f()));
    const ok = answers.filter((r) => r.status === 200);
    for (const r of answers) if (r.status !== 200) refused(r, 'concurrent');
    assert.ok(
      ok.length <= 1,
      `at most one of three 60.00 transfers fits a 100.00 day: ${answers.map((r) => r.text).join('\n')}`,
    );
  });

  it('every caveat the tuples API accepts is stored as the policy reads it: a live grant, never a 503', async () => {
    let n = 0;
    /** A new delegate over bob with `caveat`, and their transfer from bob's wallet (from loopback, now). */
    const delegatedWith = async (caveat: Record<string, unknown>) => {
      const d = await j.signUp(`+25471142000${n++}`);
      const dToCarol = (await j.addPayee(d, carol.phone)).json.id as string;
      const t = await tuples('PUT', '/v1/tenants/demo/tuples', {
        subject: { ns: 'customer', id: d.id },
        relation: 'payer',
        object: { ns: 'customer', id: bob.id },
        caveat,
      });
      assert.equal(t.status, 201, t.text);
      // The edge drops the subject's cached tuples on NOTIFY, moments after the write commits.
      const until = Date.now() + 5000;
      for (;;) {
        const f = fieldsOf(dToCarol);
        const r = (await rawTransfer(d, f, JSON.stringify({ ...f, payerCustomerId: bob.id }))).final;
        if (r.json?.code !== 'POLICY_DENIED' || Date.now() > until) return { t, r };
        await new Promise((res) => setTimeout(res, 50));
      }
    };
    // A bare address (a range of one) and a padded range: accepted, so stored as ranges that match.
    const bare = await delegatedWith({ ip_ranges: [' ::1 ', '127.0.0.1'] });
    assert.equal(bare.r.status, 200, bare.r.text);
    assert.deepEqual(bare.t.json.caveat.ip_ranges, ['::1/128', '127.0.0.1/32']);
    // RFC 3339 allows a lower-case `t` and `z`; the policy's parser does not (it answered 503).
    const lower = await delegatedWith({ expires_at: '2099-01-01t00:00:00z' });
    assert.equal(lower.r.status, 200, lower.r.text);
    assert.equal(lower.r.json.payer_customer_id, bob.id);
    assert.equal(lower.t.json.caveat.expires_at, '2099-01-01T00:00:00.000Z');
    const offset = await delegatedWith({ expires_at: '2099-01-01T00:00:00.123456789+14:00' });
    assert.equal(offset.r.status, 200, offset.r.text);
    // A time the format allows but that is no instant is refused, not stored.
    const leap = await tuples('PUT', '/v1/tenants/demo/tuples', {
      subject: { ns: 'customer', id: mallory.id },
      relation: 'payer',
      object: { ns: 'customer', id: bob.id },
      caveat: { expires_at: '2099-02-30T00:00:00Z' },
    });
    refused(leap, 'no such day');
    // Past 2262 a time is no int64 of nanoseconds (the policy's clock); the grant still works.
    const far = await delegatedWith({ expires_at: '2300-01-01T00:00:00Z' });
    assert.equal(far.r.status, 200, far.r.text);
  });

  it('agents and outlets reads: odd queries and foreign or tampered cursors are clean 4xx, never 5xx', async () => {
    const get = (path: string) =>
      call(gw, 'GET', path, {
        headers: { authorization: `Bearer ${adminToken}`, 'x-request-id': randomUUID() },
      });
    const post = (path: string, json: unknown) =>
      call(gw, 'POST', path, {
        json,
        headers: {
          authorization: `Bearer ${adminToken}`,
          'x-request-id': randomUUID(),
          'idempotency-key': `ag-${randomUUID()}`,
        },
      });
    for (let i = 0; i < 2; i++) {
      const o = await post('/v1/outlets', { name: `Atk ${i}`, region: 'Coast' });
      assert.equal(o.status, 201, o.text);
      const a = await post('/v1/agents', {
        code: `ATK${i}00`,
        phone: `+25471143000${i}`,
        name: `Atk Agent ${i}`,
        outletId: o.json.id,
        day_max_amount: '5000',
      });
      assert.equal(a.status, 201, a.text);
    }
    const page = await get('/v1/agents?limit=1');
    assert.equal(page.status, 200, page.text);
    const outletsPage = await get('/v1/outlets?limit=1');
    assert.equal(outletsPage.status, 200, outletsPage.text);
    const cursor = page.json.next_cursor as string;
    assert.ok(cursor && outletsPage.json.next_cursor, 'both lists have a second page');
    const probes = [
      '/v1/agents?limit=0',
      '/v1/agents?limit=-1',
      '/v1/agents?limit=100000',
      '/v1/agents?status=ACTIVE',
      '/v1/agents?outletId=not-a-uuid',
      '/v1/agents/not-a-uuid',
      `/v1/agents/${randomUUID().toUpperCase()}`,
      '/v1/outlets?region=',
      `/v1/outlets?region=${'x'.repeat(5000)}`,
      '/v1/outlets?cursor=abc.def',
      `/v1/outlets?cursor=${'a'.repeat(600)}`,
      `/v1/outlets?limit=1&cursor=${encodeURIComponent(cursor)}`,
      `/v1/agents?limit=1&status=active&cursor=${encodeURIComponent(cursor)}`,
      `/v1/agents?limit=1&cursor=${encodeURIComponent(`${Buffer.from('["x"]').toString('base64url')}.${cursor.split('.')[1]}`)}`,
      `/v1/agents?limit=1&cursor=${encodeURIComponent(outletsPage.json.next_cursor)}`,
      '/v1/schedule-templates?kind=fee',
      `/v1/schedule-templates/${randomUUID()}:copy`,
    ];
    for (const path of probes) {
      const r = await get(path);
      assert.ok(r.status >= 400 && r.status < 500, `${path}: ${r.status} ${r.text}`);
    }
  });

  it("core judges an hours caveat itself: outside the tuple's hours it refuses, inside it pays", async () => {
    const { rows } = await tdb.db.query<{ tz: string | null }>(
      `SELECT security->>'timezone' AS tz FROM tenants WHERE id = 'demo'`,
    );
    const h = localHour(Date.now(), rows[0]?.tz);
    // Away from this hour and the next (no flake on an hour boundary); and a window around it.
    const outside = h + 2 <= 23 ? { from: h + 2, to: 24 } : { from: (h + 2) % 24, to: h };
    const inside = { from: Math.max(0, h - 1), to: Math.min(24, h + 2) };
    const d = await j.signUp('+254711440001');
    const dToCarol = (await j.addPayee(d, carol.phone)).json.id as string;
    /** Straight to core (no edge decision, no edge cache): the step-up core asks for, then the transfer. */
    const direct = async () => {
      const f = fieldsOf(dToCarol);
      const body = { ...f, payerCustomerId: bob.id };
      const payload = JSON.stringify(body);
      const headers = { ...j.intent(d, f, payload), 'idempotency-key': `dh-${randomUUID()}` };
      const send = (token: string) =>
        call(core, 'POST', '/v1/transfers', { json: body, headers: { ...j.bearer(d, token), ...headers } });
      const first = await send(d.access);
      assert.equal(first.json?.code, 'MFA_REQUIRED', first.text);
      return send(await j.stepUp(d, first.json.challenge, 'device'));
    };
    const grantHours = async (hours: { from: number; to: number }) => {
      const t = await tuples('PUT', '/v1/tenants/demo/tuples', {
        subject: { ns: 'customer', id: d.id },
        relation: 'payer',
        object: { ns: 'customer', id: bob.id },
        caveat: { hours },
      });
      assert.ok(t.status === 200 || t.status === 201, t.text);
    };
    await grantHours(outside);
    const late = await direct();
    assert.equal(late.status, 403, late.text);
    assert.equal(late.json.code, 'PAYER_NOT_AUTHORIZED');
    await grantHours(inside);
    const inHours = await direct();
    assert.equal(inHours.status, 200, inHours.text);
    assert.equal(inHours.json.payer_customer_id, bob.id);
  });

  it('two confirms of one delegated transfer at once post it once', async () => {
    const f = fieldsOf(aliceToCarol, '7.00');
    const created = await rawTransfer(alice, f, JSON.stringify({ ...f, payerCustomerId: bob.id }));
    assert.equal(created.final.status, 200, created.final.text);
    const before = await j.balance(bob.wallet);
    const confirmOnce = () =>
      call(gw, 'POST', '/v1/transfers/confirm', {
        json: { transferId: created.final.json.id, payerCustomerId: bob.id },
        headers: { ...j.bearer(alice, created.token), 'idempotency-key': `cc-${randomUUID()}` },
      });
    const answers = await Promise.all([confirmOnce(), confirmOnce(), confirmOnce()]);
    const texts = answers.map((r) => r.text).join('\n');
    assert.equal(answers.filter((r) => r.status === 200).length, 1, texts);
    for (const r of answers) if (r.status !== 200) refused(r, 'second confirm');
    const moved = before - (await j.balance(bob.wallet));
    assert.equal(moved, 7_000_000n, `bob paid 7.00 once (${moved})`);
  });
});
