import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { quoteFee } from '../../core/admin/schedules.ts';
import { origOf } from '../../core/identity/challenge.ts';
import { parseAmount, format } from '../../core/ledger/money.ts';
import { intentPayload } from '../../core/payments/transfers.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';

/**
 * Issue 7, end to end through the dev gateway with nothing mocked: sign-up, step-up, payee,
 * transfer with intent signing, confirm, balances, masked history; plus the device-assertion
 * path, high risk at AAL 2, the daily limit, concurrent confirms and the bad inputs.
 */
describe('customer transfers through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: Record<string, any>;

  interface Customer { phone: string; device: string; access: string; key: KeyObject; publicKey: string; deviceId: string; wallet: string; id: string }
  const json = { 'content-type': 'application/json' };

  async function lastCode(phone: string): Promise<string> {
    const lines = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    const code = lines.filter((l) => l.to === phone).at(-1)?.code;
    assert.equal(typeof code, 'string');
    return code;
  }

  const bearer = (c: Customer, token = c.access) => ({ authorization: `Bearer ${token}`, 'x-device-id': c.device });

  /** Step up against `challenge` with an SMS OTP (or the device key) and return the AAL 2 token. */
  async function stepUp(c: Customer, challenge: string, method: 'otp' | 'device' = 'otp'): Promise<string> {
    let body: Record<string, unknown>;
    if (method === 'otp') {
      const sent = await call(gw, 'POST', '/customers/auth/stepup/otp', { json: { challengeToken: challenge }, headers: bearer(c) });
      assert.ok(sent.status === 202 || sent.status === 204 || sent.status === 200, sent.text);
      body = { challengeToken: challenge, otp: await lastCode(c.phone) };
    } else {
      body = { challengeToken: challenge, deviceAssertion: { deviceId: c.deviceId, signature: sign(null, Buffer.from(challenge), c.key).toString('base64url') } };
    }
    const done = await call(gw, 'POST', '/customers/auth/stepup/complete', { json: body, headers: bearer(c) });
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.aal, 2);
    return done.json.accessToken;
  }

  /** Call; if the answer is 403 MFA_REQUIRED, step up and repeat the same request once. */
  async function withStepUp(c: Customer, method: string, path: string, payload: unknown, extra: Record<string, string> = {}, how: 'otp' | 'device' = 'otp'): Promise<{ first: Res; final: Res; token: string }> {
    const first = await call(gw, method, path, { json: payload, headers: { ...bearer(c), ...extra } });
    if (!(first.status === 403 && first.json?.code === 'MFA_REQUIRED')) return { first, final: first, token: c.access };
    const token = await stepUp(c, first.json.challenge, how);
    const final = await call(gw, method, path, { json: payload, headers: { ...bearer(c, token), ...extra } });
    return { first, final, token };
  }

  async function signUp(phone: string): Promise<Customer> {
    const device = `dev-${randomUUID().slice(0, 8)}`;
    assert.equal((await call(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId: 'demo', phone } })).status, 202);
    const v = await call(gw, 'POST', '/customers/auth/otp/verify', { json: { tenantId: 'demo', phone, otp: await lastCode(phone) } });
    assert.equal((await call(gw, 'POST', '/customers/auth/pin/set', { json: { tenantId: 'demo', phone, pin: '4826', verificationToken: v.json.verificationToken } })).status, 204);
    const login = await call(gw, 'POST', '/customers/auth/login', { json: { tenantId: 'demo', phone, pin: '4826' }, headers: { 'x-device-id': device } });
    assert.equal(login.status, 200, login.text);
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const c: Customer = {
      phone, device, access: login.json.accessToken, key: privateKey, publicKey: (publicKey.export({ format: 'jwk' }) as { x: string }).x,
      deviceId: '', wallet: '', id: '',
    };
    const reg = await withStepUp(c, 'POST', '/customers/devices', { publicKey: c.publicKey, label: 'test phone' });
    assert.equal(reg.final.status, 201, reg.final.text);
    c.deviceId = reg.final.json.deviceId;
    c.access = reg.token;
    const accounts = await call(gw, 'GET', '/v1/accounts', { headers: bearer(c) });
    assert.equal(accounts.status, 200, accounts.text);
    assert.equal(accounts.json.items.length, 1);
    assert.equal(accounts.json.items[0].product_code, 'WALLET_MAIN');
    assert.equal(accounts.json.items[0].currency, 'KES');
    assert.equal(accounts.json.items[0].owner.phone, `${phone.slice(0, 4)}${'*'.repeat(phone.length - 6)}${phone.slice(-2)}`);
    c.wallet = accounts.json.items[0].id;
    const { rows } = await tdb.db.query<{ id: string }>(`SELECT id FROM customers WHERE tenant_id = 'demo' AND phone_e164 = $1`, [phone]);
    c.id = rows[0]?.id ?? '';
    return c;
  }

  let coreToken = '';
  async function fund(account: string, amount: string): Promise<void> {
    if (!coreToken) {
      const t = await call(gw, 'POST', '/oauth2/token', { json: { grant_type: 'client_credentials', client_id: demo.coreClient.clientId, client_secret: demo.coreClient.clientSecret, scope: 'core:write' } });
      assert.equal(t.status, 200, t.text);
      coreToken = t.json.access_token;
    }
    const r = await call(gw, 'POST', '/v1/core/postings', {
      json: { currency: 'KES', entries: [{ account_id: demo.settlementAccounts.KES, side: 'debit', amount }, { account_id: account, side: 'credit', amount }] },
      headers: { authorization: `Bearer ${coreToken}`, 'idempotency-key': `fund-${randomUUID()}`, 'x-request-id': randomUUID() },
    });
    assert.equal(r.status, 201, r.text);
  }

  async function balance(account: string): Promise<bigint> {
    const { rows } = await tdb.db.query<{ posted: string }>('SELECT (credits_posted - debits_posted)::text AS posted FROM ledger_balances WHERE account_id = $1', [account]);
    const text = rows[0]?.posted ?? '0';
    const p = parseAmount(text.replace(/^-/, ''), { allowZero: true });
    assert.ok(p.ok, text);
    return text.startsWith('-') ? -p.micro : p.micro;
  }

  const intent = (c: Customer, body: { amount: string; currency: string; beneficiaryId: string }, payload: string) => ({
    'x-intent-device-id': c.deviceId,
    'x-intent-signature': sign(null, Buffer.from(intentPayload({ ...body, orig: origOf('POST', '/v1/transfers', payload) })), c.key).toString('base64url'),
  });

  /** Create a transfer (stepping up as needed) and return the final answer. */
  async function transfer(c: Customer, beneficiaryId: string, amount: string, how: 'otp' | 'device' = 'device', over: Partial<{ currency: string }> = {}) {
    const body = { amount, currency: over.currency ?? 'KES', beneficiaryId, reference: `ref-${randomUUID().slice(0, 8)}` };
    const payload = JSON.stringify(body);
    const headers = { ...intent(c, body, payload), 'idempotency-key': `tr-${randomUUID()}` };
    return { ...(await withStepUp(c, 'POST', '/v1/transfers', body, headers, how)), body, headers };
  }

  let alice: Customer;
  let bob: Customer;
  let bobBeneficiary = '';

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-transfers-'));
    const config = loadConfig({ GATEWAY_PORT: '0', CORE_PORT: '0', AUTHZ_PORT: '0', DATA_DIR: dataDir, DATABASE_URL: tdb.url, LOG_LEVEL: 'silent' });
    stack = await startStack(config, { checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    alice = await signUp('+254711000001');
    bob = await signUp('+254711000002');
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('adds a payee by phone, masked, and refuses yourself or an unknown phone', async () => {
    const r = await call(gw, 'POST', '/v1/beneficiaries', { json: { phone: bob.phone, nickname: 'Bob' }, headers: bearer(alice) });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.phone, '+254*******02');
    bobBeneficiary = r.json.id;
    assert.equal((await call(gw, 'POST', '/v1/beneficiaries', { json: { phone: alice.phone }, headers: bearer(alice) })).json.code, 'CANNOT_PAY_SELF');
    assert.equal((await call(gw, 'POST', '/v1/beneficiaries', { json: { phone: '+254799999998' }, headers: bearer(alice) })).status, 404);
  });

  it('moves money: MFA_REQUIRED → OTP step-up → repeat → confirm; balances and fee change exactly; history is masked', async () => {
    await fund(alice.wallet, '5000.00');
    const aliceBefore = await balance(alice.wallet);
    const bobBefore = await balance(bob.wallet);
    const t = await transfer(alice, bobBeneficiary, '1000.00', 'otp');
    assert.equal(t.first.status, 403);
    assert.equal(t.first.json.code, 'MFA_REQUIRED');
    assert.ok(t.first.json.challenge);
    assert.equal(t.final.status, 200, t.final.text);
    assert.equal(t.final.json.status, 'PENDING');
    const expectedFee = (await quoteFee(tdb.db, { tenantId: 'demo', product: 'TRANSFER', amount: 1_000_000_000n, currency: 'KES' })).fee;
    assert.equal(t.final.json.fee, format(expectedFee));
    assert.equal(t.final.json.total, format(1_000_000_000n + expectedFee));
    const replay = await call(gw, 'POST', '/v1/transfers', { json: t.body, headers: { ...bearer(alice, t.token), ...t.headers } });
    assert.equal(replay.json.id, t.final.json.id, 'an idempotent replay answers the same transfer');
    const confirm = await call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t.final.json.id }, headers: { ...bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` } });
    assert.equal(confirm.status, 200, confirm.text);
    assert.equal(confirm.json.status, 'POSTED');
    assert.equal(await balance(alice.wallet), aliceBefore - 1_000_000_000n - expectedFee);
    assert.equal(await balance(bob.wallet), bobBefore + 1_000_000_000n);
    const { rows } = await tdb.db.query<{ fee_account_id: string | null }>('SELECT fee_account_id FROM transfers WHERE id = $1', [t.final.json.id]);
    if (expectedFee > 0n) assert.equal(await balance(rows[0]?.fee_account_id ?? ''), expectedFee);
    const history = await call(gw, 'GET', '/v1/transactions?direction=out', { headers: bearer(alice) });
    assert.equal(history.status, 200, history.text);
    assert.equal(history.json.items[0].id, t.final.json.id);
    assert.equal(history.json.items[0].counterparty.phone, '+254*******02');
    const incoming = await call(gw, 'GET', '/v1/transactions?direction=in', { headers: bearer(bob) });
    assert.equal(incoming.json.items[0].counterparty.phone, '+254*******01');
    assert.equal(incoming.json.items[0].amount, '1000.00');
  });

  it('does the same with a device assertion instead of an OTP', async () => {
    const t = await transfer(alice, bobBeneficiary, '10.00', 'device');
    assert.equal(t.first.json.code, 'MFA_REQUIRED');
    assert.equal(t.final.status, 200, t.final.text);
  });

  it('refuses a changed amount after step-up: the challenge was for the other request', async () => {
    const t = await transfer(alice, bobBeneficiary, '20.00');
    assert.equal(t.final.status, 200);
    const changed = { ...t.body, amount: '2000.00' };
    const payload = JSON.stringify(changed);
    const again = await call(gw, 'POST', '/v1/transfers', { json: changed, headers: { ...bearer(alice, t.token), ...intent(alice, changed, payload), 'idempotency-key': `tr-${randomUUID()}` } });
    assert.equal(again.status, 403);
    assert.equal(again.json.code, 'MFA_REQUIRED');
  });

  it('treats a request from another device as high risk: step-up even at AAL 2', async () => {
    const t = await transfer(alice, bobBeneficiary, '5.00');
    const read = await call(gw, 'GET', '/v1/transactions', { headers: { authorization: `Bearer ${t.token}`, 'x-device-id': 'someone-elses-phone' } });
    assert.equal(read.status, 403);
    assert.equal(read.json.code, 'MFA_REQUIRED');
  });

  it('moves money once when two confirms race', async () => {
    const t = await transfer(alice, bobBeneficiary, '100.00');
    const before = await balance(bob.wallet);
    const confirm = () => call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t.final.json.id }, headers: { ...bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` } });
    const results = await Promise.all([confirm(), confirm()]);
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 409], results.map((r) => r.text).join(' | '));
    assert.equal(await balance(bob.wallet), before + 100_000_000n);
  });

  it('lets two customers pay each other at the same moment without a deadlock (no transaction retried for 40P01)', async () => {
    const aliceBeneficiary = (await call(gw, 'POST', '/v1/beneficiaries', { json: { phone: alice.phone }, headers: bearer(bob) })).json.id as string;
    await fund(alice.wallet, '1000.00');
    await fund(bob.wallet, '1000.00');
    const deadlockRetries = async () => {
      const m = await call(gw, 'GET', '/v1/metrics');
      const line = m.text.split('\n').find((l) => l.startsWith('db_tx_retries_total{code="40P01"}'));
      return Number(line?.split(' ')[1] ?? 0);
    };
    const before = await deadlockRetries();
    const flow = async (from: Customer, beneficiaryId: string) => {
      const t = await transfer(from, beneficiaryId, '10.00');
      assert.equal(t.final.status, 200, t.final.text);
      const c = await call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t.final.json.id }, headers: { ...bearer(from, t.token), 'idempotency-key': `cf-${randomUUID()}` } });
      assert.equal(c.status, 200, c.text);
    };
    // Each payer's row is locked while the other's transaction references it (foreign keys):
    // FOR UPDATE there deadlocked; FOR NO KEY UPDATE does not.
    await Promise.all([flow(alice, bobBeneficiary), flow(bob, aliceBeneficiary), flow(alice, bobBeneficiary), flow(bob, aliceBeneficiary)]);
    assert.equal(await deadlockRetries(), before);
  });

  it('refuses a transfer over the daily limit with LIMIT_EXCEEDED', async () => {
    await fund(alice.wallet, '400000.00');
    const a = await transfer(alice, bobBeneficiary, '150000.00');
    assert.equal(a.final.status, 200, a.final.text);
    // The day so far holds about 1,200 KES from the earlier tests: 150,000 + 145,000 stays under 300,000.
    const b = await transfer(alice, bobBeneficiary, '145000.00');
    assert.equal(b.final.status, 200, b.final.text);
    const c = await transfer(alice, bobBeneficiary, '5000.00');
    assert.equal(c.final.status, 422, c.final.text);
    assert.equal(c.final.json.code, 'LIMIT_EXCEEDED');
    assert.match(c.final.json.message, /day/);
  });

  it('applies the limit rows of the payer\'s KYC level when the schedule has them, the general rows otherwise', async () => {
    const { rows } = await tdb.db.query<{ id: string }>(`SELECT id FROM admin_schedules WHERE tenant_id = 'demo' AND kind = 'LIMIT' AND product = 'TRANSFER' AND status = 'ACTIVE'`);
    assert.ok(rows[0]);
    await tdb.db.query(`INSERT INTO admin_schedule_limits (id, tenant_id, schedule_id, action, period, max_amount, kyc_level) VALUES ($1, 'demo', $2, 'TRANSFER', 'transaction', 1000, '1')`, [randomUUID(), rows[0].id]);
    const carol = await signUp('+254711000007');
    const dave = await signUp('+254711000008');
    await tdb.db.query(
      `INSERT INTO kyc_profiles (tenant_id, customer_id, level, status, full_name, id_type, id_number, date_of_birth, registered_by, expires_at, created_at, updated_at)
       VALUES ('demo', $1, 1, 'ACTIVE', 'Carol Wambui', 'NATIONAL_ID', 'KYC-LIMIT-1', '1990-01-01', $2, now() + interval '1 year', now(), now())`, [carol.id, randomUUID()]);
    const payee = async (c: Customer) => (await call(gw, 'POST', '/v1/beneficiaries', { json: { phone: bob.phone }, headers: bearer(c) })).json.id as string;
    for (const c of [carol, dave]) await fund(c.wallet, '5000.00');
    const over = await transfer(carol, await payee(carol), '1500.00');
    assert.equal(over.final.status, 422, over.final.text);
    assert.equal(over.final.json.code, 'LIMIT_EXCEEDED');
    assert.match(over.final.json.message, /transaction/);
    const within = await transfer(carol, await payee(carol), '900.00');
    assert.equal(within.final.status, 200, within.final.text);
    const general = await transfer(dave, await payee(dave), '1500.00');
    assert.equal(general.final.status, 200, `no KYC record: the general rows apply: ${general.final.text}`);
  });

  it('refuses insufficient funds, a removed payee, and a bad intent signature', async () => {
    const poor = await signUp('+254711000003');
    const ben = await call(gw, 'POST', '/v1/beneficiaries', { json: { phone: alice.phone }, headers: bearer(poor) });
    assert.equal(ben.status, 201, ben.text);
    const broke = await transfer(poor, ben.json.id, '50.00');
    assert.equal(broke.final.json.code, 'INSUFFICIENT_FUNDS', broke.final.text);
    assert.equal((await call(gw, 'DELETE', `/v1/beneficiaries/${ben.json.id}`, { headers: bearer(poor) })).status, 204);
    await fund(poor.wallet, '100.00');
    const removed = await transfer(poor, ben.json.id, '10.00');
    assert.equal(removed.final.json.code, 'BENEFICIARY_NOT_FOUND', removed.final.text);
    const body = { amount: '10.00', currency: 'KES', beneficiaryId: bobBeneficiary, reference: 'x1' };
    const signedOther = { ...intent(alice, { ...body, amount: '11.00' }, JSON.stringify(body)), 'idempotency-key': `tr-${randomUUID()}` };
    const forged = await withStepUp(alice, 'POST', '/v1/transfers', body, signedOther, 'device');
    assert.equal(forged.final.status, 403);
    assert.equal(forged.final.json.code, 'INTENT_SIGNATURE_INVALID');
  });

  it('refuses bad amounts and currencies at core with clear codes (never 500)', async () => {
    const cases: [Record<string, unknown>, number][] = [
      [{ amount: '10.001', currency: 'KES' }, 422],
      [{ amount: '1e3', currency: 'KES' }, 400],
      [{ amount: 10.5, currency: 'KES' }, 400],
      [{ amount: '-5.00', currency: 'KES' }, 400],
      [{ amount: '10.00', currency: 'USD' }, 422],
      [{ amount: '10.00', currency: 'XYZ' }, 422],
    ];
    for (const [over, status] of cases) {
      const body = { beneficiaryId: bobBeneficiary, reference: 'bad', ...over };
      const payload = JSON.stringify(body);
      const sig = intent(alice, { amount: String(over.amount), currency: String(over.currency), beneficiaryId: bobBeneficiary }, payload);
      const r = await withStepUp(alice, 'POST', '/v1/transfers', body, { ...sig, 'idempotency-key': `tr-${randomUUID()}` }, 'device');
      assert.equal(r.final.status, status, `${JSON.stringify(over)} → ${r.final.text}`);
      assert.equal(typeof r.final.json.code, 'string');
    }
  });

  it('answers a non-JSON body on the transfer route with 400 at core once stepped up for those bytes (never 500)', async () => {
    const raw = 'amount=10.00&currency=KES';
    const sig = intent(alice, { amount: '10.00', currency: 'KES', beneficiaryId: bobBeneficiary }, raw);
    const headers = { ...bearer(alice), ...json, ...sig, 'idempotency-key': `tr-${randomUUID()}` };
    const first = await call(gw, 'POST', '/v1/transfers', { body: raw, headers });
    assert.equal(first.json?.code, 'MFA_REQUIRED', first.text);
    const token = await stepUp(alice, first.json.challenge, 'device');
    const final = await call(gw, 'POST', '/v1/transfers', { body: raw, headers: { ...headers, ...bearer(alice, token) } });
    assert.equal(final.status, 400, final.text);
    assert.equal(final.json?.code, 'MALFORMED_JSON', final.text);
  });

  it('refuses to confirm another customer\'s transfer, and an expired one', async () => {
    const t = await transfer(alice, bobBeneficiary, '1.00');
    const foreign = await withStepUp(bob, 'POST', '/v1/transfers/confirm', { transferId: t.final.json.id }, { 'idempotency-key': `cf-${randomUUID()}` }, 'device');
    assert.equal(foreign.final.status, 404, `${foreign.first.text} ==> ${foreign.final.text}`);
    await tdb.db.query(`UPDATE transfers SET expires_at = now() - interval '1 second' WHERE id = $1`, [t.final.json.id]);
    const late = await call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t.final.json.id }, headers: { ...bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` } });
    assert.equal(late.status, 422, late.text);
    assert.equal(late.json.code, 'TRANSFER_EXPIRED');
    const { rows } = await tdb.db.query<{ status: string }>('SELECT status FROM transfers WHERE id = $1', [t.final.json.id]);
    assert.equal(rows[0]?.status, 'EXPIRED');
  });

  it('keeps each customer\'s Idempotency-Keys their own: another customer\'s replay of a key runs as their own request and cannot poison it', async () => {
    await fund(alice.wallet, '100.00');
    const t = await transfer(alice, bobBeneficiary, '3.00');
    assert.equal(t.final.status, 200, t.final.text);
    const key = { 'idempotency-key': `cf-${randomUUID()}` };
    const mine = await call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t.final.json.id }, headers: { ...bearer(alice, t.token), ...key } });
    assert.equal(mine.status, 200, mine.text);
    assert.equal(mine.json.status, 'POSTED');
    // Bob presents Alice's key with Alice's very request: his own confirm runs (not his transfer: 404), nothing of Alice's is shown.
    const stolen = await withStepUp(bob, 'POST', '/v1/transfers/confirm', { transferId: t.final.json.id }, key, 'device');
    assert.equal(stolen.final.status, 404, stolen.final.text);
    assert.equal(stolen.final.headers['idempotent-replayed'], undefined);
    assert.doesNotMatch(stolen.final.text, new RegExp(`${t.body.reference}|"fee"|"amount"`), 'neither amount, fee, payee nor reference of Alice\'s transfer');
    const again = await call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t.final.json.id }, headers: { ...bearer(alice, t.token), ...key } });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.deepEqual(again.json, mine.json, 'Alice\'s retry still gets her first answer');
    // Bob uses a key before Alice does: Alice's later confirm with that key runs (no 409).
    const t2 = await transfer(alice, bobBeneficiary, '2.00');
    assert.equal(t2.final.status, 200, t2.final.text);
    const early = { 'idempotency-key': `cf-${randomUUID()}` };
    const poison = await withStepUp(bob, 'POST', '/v1/transfers/confirm', { transferId: t2.final.json.id }, early, 'device');
    assert.equal(poison.final.status, 404, poison.final.text);
    const later = await call(gw, 'POST', '/v1/transfers/confirm', { json: { transferId: t2.final.json.id }, headers: { ...bearer(alice, t2.token), ...early } });
    assert.equal(later.status, 200, later.text);
    assert.equal(later.json.status, 'POSTED');
  });

  it('records transfer events in the outbox and audits each step with the policy and registry versions', async () => {
    const { rows } = await tdb.db.query<{ event: string }>(`SELECT DISTINCT event FROM outbox WHERE aggregate = 'transfer'`);
    const events = rows.map((r) => r.event).sort();
    assert.deepEqual(events, ['transfer.completed', 'transfer.created', 'transfer.failed'], JSON.stringify(events));
    const audits = await tdb.db.query<{ decision: Record<string, unknown> }>(`SELECT decision FROM audit_log WHERE action = 'transfer.create' ORDER BY id DESC LIMIT 1`);
    const d = audits.rows[0]?.decision ?? {};
    assert.ok(d.policy_version && d.registry_version && d.decision_id, JSON.stringify(d));
  });
});
