import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { installAuditRefusal } from '../helpers/audit-refusal.ts';
import { call, type Res } from '../helpers/http.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

const gatewayIdentity = { 'x-tenant-id': 'ta', 'x-principal-id': 'service-token:ussd-gw', 'x-roles': 'ussd' };

describe('USSD: customer session and agent menu', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let la: AgentLogin;
  const alice = '+254722000061';
  const bob = '+254722000062';
  const pin = '2580';
  let session = 0;
  let n = 0;
  const idem = () => ({ 'idempotency-key': `ussd-${++n}-${Date.now()}` });
  const ussd = async (
    path: string,
    phone: string,
    text: string,
    sid = `s-${session}`,
    headers: Record<string, string> = gatewayIdentity,
  ): Promise<Res> => {
    const body = new URLSearchParams({
      sessionId: sid,
      serviceCode: '*384*7#',
      phoneNumber: phone,
      text,
    }).toString();
    return call(h.origin, 'POST', path, {
      body,
      headers: viaEdge({ 'content-type': 'application/x-www-form-urlencoded', ...headers }),
    });
  };
  const cust = (text: string, phone = alice) => ussd('/v1/ussd/session', phone, text);
  const agentMenu = (text: string, phone = a.phone) => ussd('/v1/ussd/agent/menu', phone, text);
  const expectEnd = (r: Res, pattern: RegExp) => {
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers['content-type'] ?? '', /^text\/plain/);
    assert.match(r.text, /^END /, r.text);
    assert.match(r.text, pattern);
  };
  const expectCon = (r: Res, pattern: RegExp) => {
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /^CON /, r.text);
    assert.match(r.text, pattern);
  };
  const balance = async (phone: string) => {
    const { rows } = await h.tdb.db.query<{ v: string }>(
      `SELECT (b.credits_posted - b.debits_posted)::text AS v FROM ledger_balances b JOIN ledger_accounts a ON a.id = b.account_id JOIN customers c ON c.id::text = a.owner_id
        WHERE c.phone_e164 = $1 AND a.product_code = 'WALLET_MAIN'`,
      [phone],
    );
    return Number(rows[0]?.v ?? 0);
  };

  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG6001', '+254711000061');
    la = await h.login(a);
    await h.fundFloat(a, '5000.00');
    for (const [phone, idn] of [
      [alice, 'C1000061'],
      [bob, 'C1000062'],
    ] as const) {
      await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
      const v = await h.post('/customers/auth/otp/verify', {
        tenantId: 'ta',
        phone,
        otp: h.sms.lastCode(phone),
      });
      assert.equal(
        (
          await h.post('/customers/auth/pin/set', {
            tenantId: 'ta',
            phone,
            pin,
            verificationToken: v.json.verificationToken,
          })
        ).status < 300,
        true,
      );
      const k = await h.post(
        '/v1/kyc/customers',
        {
          phone,
          fullName: `Customer ${idn}`,
          idType: 'NATIONAL_ID',
          idNumber: idn,
          dateOfBirth: '1990-01-01',
        },
        bearer(la.accessToken, idem()),
      );
      assert.equal(k.status, 201, k.text);
    }
  });
  after(() => h.close());

  it('only the USSD gateway may call; a malformed form is 400, not a menu', async () => {
    const noRole = await ussd('/v1/ussd/session', alice, '', 's-x', {
      'x-tenant-id': 'ta',
      'x-principal-id': 'service-token:admin',
      'x-roles': 'admin',
    });
    assert.equal(noRole.status, 403);
    const noTenant = await ussd('/v1/ussd/agent/menu', a.phone, '', 's-x', { 'x-roles': 'ussd' });
    assert.equal(noTenant.status, 403);
    const json = await call(h.origin, 'POST', '/v1/ussd/session', {
      json: { sessionId: 'x' },
      headers: viaEdge(gatewayIdentity),
    });
    assert.equal(json.status, 415);
    const missing = await call(h.origin, 'POST', '/v1/ussd/session', {
      body: 'text=1',
      headers: viaEdge({ 'content-type': 'application/x-www-form-urlencoded', ...gatewayIdentity }),
    });
    assert.equal(missing.status, 400);
  });

  it('agent menu: float balance and cash-in through the ledger', async () => {
    session++;
    expectCon(await agentMenu(''), /1\. Float balance\n2\. Cash-in/);
    expectCon(await agentMenu('1'), /PIN/);
    expectEnd(await agentMenu('1*2580'), /Wrong PIN|Float/);
    expectEnd(await agentMenu(`1*${a.pin}`), /Float balance: KES 5000\.00/);
    session++;
    expectCon(await agentMenu('2'), /customer phone/);
    expectCon(await agentMenu(`2*${alice}`), /amount \(KES\)/);
    expectCon(await agentMenu(`2*${alice}*1000`), /Cash-in KES 1000\.00 to \+254722000061\?\nEnter PIN/);
    const done = await agentMenu(`2*${alice}*1000*${a.pin}`);
    expectEnd(done, /Cash-in of KES 1000\.00 to \+254722000061 done/);
    assert.equal(await balance(alice), 1000);
    // The gateway retrying the last request replays the answer; nothing is posted twice.
    assert.equal((await agentMenu(`2*${alice}*1000*${a.pin}`)).text, done.text);
    assert.equal(await balance(alice), 1000);
    const { rows } = await h.tdb.db.query(`SELECT kind, state FROM agent_txns WHERE agent_id = $1`, [a.id]);
    assert.deepEqual(rows, [{ kind: 'CASHIN', state: 'POSTED' }]);
  });

  it('agent menu: unexpected input at every level ends the session with a message', async () => {
    session++;
    const cases: [string, RegExp][] = [
      ['9', /Invalid choice/],
      ['x', /Invalid choice/],
      ['1*12', /4 to 6 digits/],
      ['1*abcd', /4 to 6 digits/],
      [`1*${a.pin}*1`, /Invalid choice/],
      ['2*not-a-phone', /Invalid phone number/],
      [`2*${alice}*-5`, /Invalid amount/],
      [`2*${alice}*0`, /Invalid amount/],
      [`2*${alice}*12.345`, /Invalid amount/],
      [`2*${alice}*1e3`, /Invalid amount/],
      [`2*${alice}*10*12`, /4 to 6 digits/],
      [`2*${alice}*10*${a.pin}*9`, /Invalid choice/],
      ['2**', /Invalid phone number/],
      [`2*+254799999999*10*${a.pin}`, /not registered/],
      [`2*${alice}*999999*${a.pin}`, /Insufficient balance|limit/],
      ['1'.repeat(200), /Input too long/],
    ];
    for (const [text, pattern] of cases) expectEnd(await agentMenu(text), pattern);
    expectEnd(await agentMenu('', '+254700000000'), /not registered as an agent/);
    expectEnd(await agentMenu('', 'garbage'), /not registered as an agent/);
  });

  it('customer session: balance, mini statement, send money; bad input at every level', async () => {
    session++;
    expectCon(await cust(''), /1\. Balance\n2\. Send money\n3\. Approve cash-out\n4\. Mini statement/);
    expectEnd(await cust(`1*${pin}`), /Your balance is KES 1000\.00/);
    expectEnd(await cust(`4*${pin}`), /\+KES 1000\.00/);
    session++;
    expectCon(await cust('2'), /recipient phone/);
    expectCon(await cust(`2*${bob}`), /amount/);
    expectCon(await cust(`2*${bob}*100`), /Send KES 100\.00 to \+254722000062\?/);
    const sent = await cust(`2*${bob}*100*${pin}`);
    expectEnd(sent, /Sent KES 100\.00 to \+254722000062\. Fee KES 5\.00/);
    assert.equal(await balance(alice), 895);
    assert.equal(await balance(bob), 100);
    assert.equal((await cust(`2*${bob}*100*${pin}`)).text, sent.text, 'gateway retry replays');
    assert.equal(await balance(alice), 895);
    session++;
    const cases: [string, RegExp][] = [
      ['5', /Invalid choice/],
      ['#', /Invalid choice/],
      ['1*1', /4 to 6 digits/],
      [`1*${pin}*1`, /Invalid choice/],
      ['4*', /4 to 6 digits/],
      ['2*12', /Invalid phone number/],
      [`2*${bob}*abc`, /Invalid amount/],
      [`2*${bob}*0.001`, /Invalid amount/],
      [`2*${bob}*5*1`, /4 to 6 digits/],
      [`2*${bob}*5*${pin}*1`, /Invalid choice/],
      [`2*${alice}*5*${pin}`, /yourself/],
      [`2*+254799999999*5*${pin}`, /not registered/],
      [`2*${bob}*5000*${pin}`, /Insufficient balance/],
      ['3', /No cash-out is waiting/],
      ['3*1', /No such cash-out/],
      ['3*x*1', /No such cash-out/],
    ];
    for (const [text, pattern] of cases) {
      session++;
      expectEnd(await cust(text), pattern);
    }
    expectEnd(await cust('', '+254799999999'), /not registered for mobile money/);
    assert.equal(await balance(alice), 895, 'no bad input moved money');
  });

  it('customer approves an agent cash-out on USSD; wrong PINs count towards the login lockout', async () => {
    const r = await h.post(
      '/v1/txns/cashout',
      { customerPhone: alice, amount: '200.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(r.status, 202, r.text);
    session++;
    expectCon(await cust('3'), /1\. KES 200\.00 agent AG6001/);
    expectCon(await cust('3*1'), /Withdraw KES 200\.00 \(fee KES 10\.00\) at agent AG6001\?/);
    expectEnd(await cust('3*2'), /No such cash-out/);
    expectEnd(await cust('3*1*9999'), /Wrong PIN/);
    expectEnd(await cust(`3*1*${pin}*1`), /Invalid choice/);
    expectEnd(await cust(`3*1*${pin}`), /Approved\. KES 210\.00 taken from your wallet/);
    assert.equal(await balance(alice), 685);
    assert.equal((await h.get(`/v1/txns/${r.json.id}`, bearer(la.accessToken))).json.state, 'POSTED');
    session++;
    expectEnd(await cust('3'), /No cash-out is waiting/);
    // Lockout (SPEC 8: 5 failures) shared with the app login for this phone.
    for (let i = 0; i < 5; i++) {
      session++;
      expectEnd(await cust('1*0000'), /Wrong PIN|Too many/);
    }
    session++;
    expectEnd(await cust(`1*${pin}`), /Too many wrong PINs/);
    const login = await h.post('/customers/auth/login', { tenantId: 'ta', phone: alice, pin });
    assert.equal(login.status, 429, 'the app login is locked too');
    const { rows } = await h.tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'ta' AND action = 'auth.ussd_pin' AND attrs::text LIKE '%${pin}%'`,
    );
    assert.equal(rows.length, 0, 'no PIN in the audit');
  });

  it("a right PIN whose record cannot be written neither clears nor adds to the phone's failure count", async () => {
    const phoneRows = async () =>
      new Map(
        (
          await h.tdb.db.query<{ key: Buffer; fails: number }>(
            `SELECT key, fails FROM auth_throttle WHERE tenant_id = 'ta' AND scope = 'phone'`,
          )
        ).rows.map((r) => [r.key.toString('hex'), r.fails]),
      );
    const before = await phoneRows();
    session++;
    expectEnd(await cust('1*0000', bob), /Wrong PIN/);
    const after = await phoneRows();
    const key = [...after.keys()].find((k) => after.get(k) !== before.get(k));
    assert.ok(key && (after.get(key) ?? 0) > 0, "bob's wrong PIN is counted");
    const refusal = await installAuditRefusal(h.tdb.db);
    await refusal.refuse('auth.ussd_pin');
    session++;
    // USSD's clean failure: the session ends with a message, never a balance.
    expectEnd(await cust(`1*${pin}`, bob), /Service unavailable/);
    // Admission counted the attempt (its own transaction); the success did not clear the count,
    // and the attempt the service failed was taken back: a right PIN is no failure.
    assert.equal(
      (await phoneRows()).get(key),
      after.get(key),
      'the count is neither cleared without its record nor raised by the attempt that failed',
    );
    await refusal.clear();
    session++;
    expectEnd(await cust(`1*${pin}`, bob), /Your balance is/);
    assert.equal((await phoneRows()).get(key), 0, 'a recorded success clears it');
  });
});
