import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID, sign } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { decodeJwt } from 'jose';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { origOf } from '../../shared/challenge.ts';
import { intentPayload } from '../../core/payments/transfers.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Journey } from '../helpers/journey.ts';

/**
 * Issue 13 items 1 and 2 through the dev gateway, nothing mocked: a step-up bought for one
 * transfer buys nothing else (no device, no payee, no second transfer, not with `?x=1` or
 * reordered keys); a new device key waits out its cool-off and the customer is told; a removed
 * device is refused at the edge on the next request; a failed transfer uses nothing up; a retry
 * with the same Idempotency-Key gets the stored answer; an intent signature approves once.
 */
describe('request-bound step-ups through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let j: Journey;
  let alice: Customer;
  let bob: Customer;
  let payee = '';

  const send = (
    c: Customer,
    token: string,
    method: string,
    path: string,
    json?: unknown,
    extra: Record<string, string> = {},
  ) =>
    call(gw, method, path, {
      ...(json === undefined ? {} : { json }),
      headers: { ...j.bearer(c, token), ...extra },
    });
  const assertStepUpAsked = (r: Res, method: string, path: string, body: string) => {
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.code, 'MFA_REQUIRED');
    assert.equal(
      decodeJwt(r.json.challenge).orig,
      origOf(method, path, body),
      'a fresh challenge bound to this request',
    );
  };
  /** A transfer body, its exact bytes and the headers that go with them (intent signed by `c`'s key). */
  const transferRequest = (c: Customer, amount: string) => {
    const body = {
      amount,
      currency: 'KES',
      beneficiaryId: payee,
      reference: `ref-${randomUUID().slice(0, 8)}`,
    };
    const payload = JSON.stringify(body);
    return {
      body,
      payload,
      headers: { ...j.intent(c, body, payload), 'idempotency-key': `tr-${randomUUID()}` },
    };
  };
  const transfersWith = async (reference: string) =>
    Number(
      (
        await tdb.db.query<{ n: string }>('SELECT count(*)::text AS n FROM transfers WHERE reference = $1', [
          reference,
        ])
      ).rows[0]?.n,
    );

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-stepup-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    j = journey(gw, dataDir, tdb.db, JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')));
    alice = await j.signUp('+254711000201');
    bob = await j.signUp('+254711000202');
    const p = await j.addPayee(alice, bob.phone);
    assert.equal(p.status, 201, p.text);
    payee = p.json.id;
    await j.fund(alice.wallet, '1000.00');
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('completes a step-up at /auth/stepup/complete, the path SPEC 4.2 names in the request flow', async () => {
    const first = await send(alice, alice.access, 'GET', '/customers/devices');
    const body = {
      publicKey: String(generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x),
      label: 'alias path',
    };
    const asked = await send(alice, alice.access, 'POST', '/customers/devices', body);
    assert.equal(first.status, 200, first.text);
    assert.equal(asked.status, 403, asked.text);
    const token = await j.stepUp(alice, asked.json.challenge, 'otp', '/auth/stepup/complete');
    const done = await send(alice, token, 'POST', '/customers/devices', body);
    assert.equal(done.status, 201, done.text);
  });

  it('a step-up for a 1.00 transfer registers no device, adds or removes no payee, ends no other session', async () => {
    const t = await j.transfer(alice, payee, '1.00', 'otp');
    assert.equal(t.final.status, 200, t.final.text);
    const attacker = generateKeyPairSync('ed25519');
    const reg = { publicKey: String(attacker.publicKey.export({ format: 'jwk' }).x), label: 'mine now' };
    const devicesBefore = (await tdb.db.query('SELECT 1 FROM customer_devices')).rows.length;
    assertStepUpAsked(
      await send(alice, t.token, 'POST', '/customers/devices', reg),
      'POST',
      '/customers/devices',
      JSON.stringify(reg),
    );
    assert.equal(
      (await tdb.db.query('SELECT 1 FROM customer_devices')).rows.length,
      devicesBefore,
      'nothing registered',
    );
    const carol = await j.signUp('+254711000203');
    assertStepUpAsked(
      await send(alice, t.token, 'POST', '/v1/beneficiaries', { phone: carol.phone }),
      'POST',
      '/v1/beneficiaries',
      JSON.stringify({ phone: carol.phone }),
    );
    assertStepUpAsked(
      await send(alice, t.token, 'DELETE', `/v1/beneficiaries/${payee}`),
      'DELETE',
      `/v1/beneficiaries/${payee}`,
      '',
    );
    assertStepUpAsked(
      await send(alice, t.token, 'DELETE', `/customers/devices/${alice.deviceId}`),
      'DELETE',
      `/customers/devices/${alice.deviceId}`,
      '',
    );
    const other = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone: alice.phone, pin: '4826' },
      headers: { 'x-device-id': 'other-phone' },
    });
    assertStepUpAsked(
      await send(alice, t.token, 'DELETE', `/customers/sessions/${other.json.sessionId}`),
      'DELETE',
      `/customers/sessions/${other.json.sessionId}`,
      '',
    );
    // Reads stay at their purpose's AAL without a per-request binding.
    assert.equal((await send(alice, t.token, 'GET', '/v1/beneficiaries')).status, 200);
    assert.equal((await send(alice, alice.access, 'GET', '/customers/devices')).status, 200);
    // Ending one's own current session is a logout.
    const own = await call(gw, 'DELETE', `/customers/sessions/${other.json.sessionId}`, {
      headers: { authorization: `Bearer ${other.json.accessToken}`, 'x-device-id': 'other-phone' },
    });
    assert.equal(own.status, 204, own.text);
  });

  it('a key registered with its own step-up (an OTP, as after a SIM swap) approves nothing until the cool-off has passed; the phone is told', async () => {
    const attacker = generateKeyPairSync('ed25519');
    const reg = await j.withStepUp(
      alice,
      'POST',
      '/customers/devices',
      { publicKey: String(attacker.publicKey.export({ format: 'jwk' }).x), label: 'new phone' },
      {},
      'otp',
    );
    assert.equal(reg.final.status, 201, reg.final.text);
    assert.equal(reg.final.json.status, 'cooling_off');
    const deviceId = reg.final.json.deviceId as string;
    assert.ok(
      Date.parse(reg.final.json.usableFrom) - Date.now() > 23 * 3_600_000,
      'the default cool-off is 24 hours',
    );
    const inbox = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { to: string; code?: string; text: string });
    const note = inbox.filter((m) => m.to === alice.phone).at(-1);
    assert.equal(note?.code, undefined);
    assert.match(note?.text ?? '', /new device was added/);

    // Step-up with the new key: refused while it cools off.
    const req = transferRequest(alice, '2.00');
    const first = await send(alice, alice.access, 'POST', '/v1/transfers', req.body, req.headers);
    assertStepUpAsked(first, 'POST', '/v1/transfers', req.payload);
    const asNew = await call(gw, 'POST', '/customers/auth/stepup/complete', {
      json: {
        challengeToken: first.json.challenge,
        deviceAssertion: {
          deviceId,
          signature: sign(null, Buffer.from(first.json.challenge), attacker.privateKey).toString('base64url'),
        },
      },
      headers: j.bearer(alice),
    });
    assert.equal(asNew.status, 403, asNew.text);
    assert.equal(asNew.json.code, 'DEVICE_COOLING_OFF');
    // An intent signed by the new key, with an OTP step-up for the request: refused too, and nothing used up.
    const intent = {
      'x-intent-device-id': deviceId,
      'x-intent-signature': sign(
        null,
        Buffer.from(intentPayload({ ...req.body, orig: origOf('POST', '/v1/transfers', req.payload) })),
        attacker.privateKey,
      ).toString('base64url'),
    };
    const token = await j.stepUp(alice, first.json.challenge, 'otp');
    const signed = await send(alice, token, 'POST', '/v1/transfers', req.body, { ...req.headers, ...intent });
    assert.equal(signed.status, 403, signed.text);
    assert.equal(signed.json.code, 'DEVICE_COOLING_OFF');
    assert.equal(await transfersWith(req.body.reference), 0);
    const ok = await send(alice, token, 'POST', '/v1/transfers', req.body, {
      ...req.headers,
      'idempotency-key': `tr-${randomUUID()}`,
    });
    assert.equal(ok.status, 200, `the refused attempt used nothing up: ${ok.text}`);

    const listed = await send(alice, alice.access, 'GET', '/customers/devices');
    const mine = listed.json.devices as { id: string; status: string; label: string }[];
    assert.deepEqual(
      mine.filter((d) => d.id === deviceId).map((d) => [d.status, d.label]),
      [['cooling_off', 'new phone']],
    );
    assert.equal(mine.find((d) => d.id === alice.deviceId)?.status, 'active');
    const removed = await j.withStepUp(
      alice,
      'DELETE',
      `/customers/devices/${deviceId}`,
      undefined,
      {},
      'device',
    );
    assert.equal(removed.first.json.code, 'MFA_REQUIRED');
    assert.equal(removed.final.status, 204, removed.final.text);
  });

  it('a removed device is refused at the edge on the next request: tokens it stepped up, intents naming it', async () => {
    const dan = await j.signUp('+254711000204');
    const p = await j.addPayee(dan, bob.phone);
    assert.equal(p.status, 201);
    const viaDevice = await j.transfer(dan, p.json.id, '1.00', 'device');
    assert.equal(viaDevice.first.json.code, 'MFA_REQUIRED');
    assert.equal(decodeJwt(viaDevice.token).dvc, dan.deviceId);
    assert.equal((await send(dan, viaDevice.token, 'GET', '/v1/transactions')).status, 200);
    const gone = await j.withStepUp(
      dan,
      'DELETE',
      `/customers/devices/${dan.deviceId}`,
      undefined,
      {},
      'otp',
    );
    assert.equal(gone.final.status, 204, gone.final.text);
    // Refused from the next request on (core checks the device itself); the edge's cache drops
    // the device when the revocation's notification arrives, and from then the edge refuses it.
    let next = await send(dan, viaDevice.token, 'GET', '/v1/transactions');
    for (let i = 0; i < 50 && next.json?.code !== 'device_revoked'; i++) {
      assert.equal(next.status, 401, next.text);
      await new Promise((r) => setTimeout(r, 20));
      next = await send(dan, viaDevice.token, 'GET', '/v1/transactions');
    }
    assert.equal(next.status, 401, next.text);
    assert.equal(next.json.code, 'device_revoked', 'the same code from the edge and from core');
    const named = await send(dan, dan.access, 'POST', '/v1/transfers', viaDevice.body, viaDevice.headers);
    assert.equal(named.status, 403, named.text);
    assert.equal(named.json.code, 'device_revoked');
  });

  it('one step-up authorises one transfer, once: not with a new key, ?x=1 or reordered keys; the same key replays; confirm still works', async () => {
    const t = await j.transfer(alice, payee, '3.00', 'device');
    assert.equal(t.final.status, 200, t.final.text);
    const again = (
      extra: Record<string, string>,
      path = '/v1/transfers',
      body: string = JSON.stringify(t.body),
    ) =>
      call(gw, 'POST', path, {
        body,
        headers: { ...j.bearer(alice, t.token), 'content-type': 'application/json', ...t.headers, ...extra },
      });
    const newKey = () => ({ 'idempotency-key': `tr-${randomUUID()}` });
    assertStepUpAsked(await again(newKey()), 'POST', '/v1/transfers', JSON.stringify(t.body));
    assertStepUpAsked(
      await again(newKey(), '/v1/transfers?x=1'),
      'POST',
      '/v1/transfers?x=1',
      JSON.stringify(t.body),
    );
    const reordered = JSON.stringify({
      reference: t.body.reference,
      beneficiaryId: t.body.beneficiaryId,
      currency: t.body.currency,
      amount: t.body.amount,
    });
    assertStepUpAsked(await again(newKey(), '/v1/transfers', reordered), 'POST', '/v1/transfers', reordered);
    const replay = await again({});
    assert.equal(replay.status, 200, replay.text);
    assert.equal(replay.json.id, t.final.json.id);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal(await transfersWith(t.body.reference), 1);
    const confirm = await send(
      alice,
      t.token,
      'POST',
      '/v1/transfers/confirm',
      { transferId: t.final.json.id },
      { 'idempotency-key': `cf-${randomUUID()}` },
    );
    assert.equal(confirm.status, 200, confirm.text);
    assert.equal(confirm.json.status, 'POSTED');
    const used = await tdb.db.query<{ action: string; idempotency_key: string }>(
      'SELECT action, idempotency_key FROM stepup_uses WHERE grant_jti = $1',
      [decodeJwt(t.token).jti],
    );
    assert.deepEqual(used.rows, [
      { action: 'transfer.create', idempotency_key: t.headers['idempotency-key'] },
    ]);
  });

  it('two creates racing with one step-up and two keys: one transfer, the other asked to step up', async () => {
    const req = transferRequest(alice, '4.00');
    const first = await send(alice, alice.access, 'POST', '/v1/transfers', req.body, req.headers);
    const token = await j.stepUp(alice, first.json.challenge, 'device');
    const results = await Promise.all(
      [1, 2].map(() =>
        send(alice, token, 'POST', '/v1/transfers', req.body, {
          ...req.headers,
          'idempotency-key': `tr-${randomUUID()}`,
        }),
      ),
    );
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 403], results.map((r) => r.text).join(' | '));
    assert.equal(results.find((r) => r.status === 403)?.json.code, 'MFA_REQUIRED');
    assert.ok(results.find((r) => r.status === 403)?.json.challenge, 'with a fresh challenge');
    assert.equal(await transfersWith(req.body.reference), 1);
  });

  it('a create that fails uses nothing up; an intent signature approves one transfer only', async () => {
    const erin = await j.signUp('+254711000205');
    const p = await j.addPayee(erin, bob.phone);
    const body = { amount: '50.00', currency: 'KES', beneficiaryId: p.json.id, reference: 'rent' };
    const payload = JSON.stringify(body);
    const headers = { ...j.intent(erin, body, payload), 'idempotency-key': `tr-${randomUUID()}` };
    const broke = await j.withStepUp(erin, 'POST', '/v1/transfers', body, headers, 'device');
    assert.equal(broke.final.json.code, 'INSUFFICIENT_FUNDS', broke.final.text);
    await j.fund(erin.wallet, '100.00');
    const retry = await send(erin, broke.token, 'POST', '/v1/transfers', body, headers);
    assert.equal(retry.json.code, 'INSUFFICIENT_FUNDS', 'the same key keeps its first answer');
    const fresh = await send(erin, broke.token, 'POST', '/v1/transfers', body, {
      ...headers,
      'idempotency-key': `tr-${randomUUID()}`,
    });
    assert.equal(fresh.status, 200, `the failed create used nothing up: ${fresh.text}`);
    // The very same request again: a new step-up is given, but the signature has done its work.
    const repeat = { ...headers, 'idempotency-key': `tr-${randomUUID()}` };
    const again = await j.withStepUp(erin, 'POST', '/v1/transfers', body, repeat, 'device');
    assert.equal(again.first.json.code, 'MFA_REQUIRED');
    assert.equal(again.final.status, 409, again.final.text);
    assert.equal(again.final.json.code, 'INTENT_SIGNATURE_REUSED');
    assert.equal(await transfersWith('rent'), 1);
  });
});
