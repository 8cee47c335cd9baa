/**
 * A customer's journey through the dev gateway (README "Using it"), shared by the end-to-end
 * suites: sign-up, step-up (SMS OTP from the development inbox, or the device key), device
 * registration, payees, funding, intent signing and transfers. Codes come from the development
 * inbox (`DATA_DIR/dev-sms.jsonl`) or, in production mode, from the caller's SMS receiver (a
 * function of the phone). Nothing is mocked; the only
 * shortcut is `coolOff`, which moves a new device key's cool-off into the past in the database
 * (the suite in test/e2e/stepup-binding.test.ts checks the cool-off itself).
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Db } from '../../shared/db/pool.ts';
import { origOf } from '../../shared/challenge.ts';
import { parseAmount } from '../../shared/money.ts';
import { intentPayload } from '../../core/payments/transfers.ts';
import { call, type Res } from './http.ts';

export interface Customer {
  phone: string;
  device: string;
  access: string;
  key: KeyObject;
  publicKey: string;
  deviceId: string;
  wallet: string;
  id: string;
}

/** The parts of DATA_DIR/demo.json (written by the seed) the journey uses. */
export interface Demo {
  coreClient: { clientId: string; clientSecret: string };
  settlementAccounts: Record<string, string>;
}

/** The latest code sent to a phone. */
export type CodeSource = (phone: string) => Promise<string>;

/** Codes of the development inbox in `dataDir`. */
function inboxCodes(dataDir: string): CodeSource {
  return async (phone) => {
    const lines = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const code = lines.filter((l) => l.to === phone && l.code).at(-1)?.code;
    assert.equal(typeof code, 'string');
    return code;
  };
}

export interface JourneyOptions {
  /** Whose customers sign up (default `demo`). */
  tenantId?: string;
  /** How requests are sent (default ./http.ts `call`; a caller may retry what was never forwarded). */
  call?: typeof call;
}

/** `codes`: the development DATA_DIR, or where codes arrive. */
export function journey(
  gw: string,
  codes: string | CodeSource,
  db: Db,
  demo: Demo,
  opts: JourneyOptions = {},
) {
  const lastCode = typeof codes === 'string' ? inboxCodes(codes) : codes;
  const tenantId = opts.tenantId ?? 'demo';
  const send = opts.call ?? call;

  const bearer = (c: Customer, token = c.access) => ({
    authorization: `Bearer ${token}`,
    'x-device-id': c.device,
  });

  /** Step up against `challenge` with an SMS OTP (or the device key) and return the AAL 2 token. */
  async function stepUp(
    c: Customer,
    challenge: string,
    method: 'otp' | 'device' = 'otp',
    completePath = '/customers/auth/stepup/complete',
  ): Promise<string> {
    let body: Record<string, unknown>;
    if (method === 'otp') {
      const sent = await send(gw, 'POST', '/customers/auth/stepup/otp', {
        json: { challengeToken: challenge },
        headers: bearer(c),
      });
      assert.ok(sent.status === 202 || sent.status === 204 || sent.status === 200, sent.text);
      body = { challengeToken: challenge, otp: await lastCode(c.phone) };
    } else {
      body = {
        challengeToken: challenge,
        deviceAssertion: {
          deviceId: c.deviceId,
          signature: sign(null, Buffer.from(challenge), c.key).toString('base64url'),
        },
      };
    }
    const done = await send(gw, 'POST', completePath, { json: body, headers: bearer(c) });
    assert.equal(done.status, 200, done.text);
    assert.equal(done.json.aal, 2);
    return done.json.accessToken;
  }

  /** Call; if the answer is 403 MFA_REQUIRED, step up and repeat the same request once. */
  async function withStepUp(
    c: Customer,
    method: string,
    path: string,
    payload: unknown,
    extra: Record<string, string> = {},
    how: 'otp' | 'device' = 'otp',
  ): Promise<{ first: Res; final: Res; token: string }> {
    const first = await send(gw, method, path, { json: payload, headers: { ...bearer(c), ...extra } });
    if (!(first.status === 403 && first.json?.code === 'MFA_REQUIRED'))
      return { first, final: first, token: c.access };
    const token = await stepUp(c, first.json.challenge, how);
    const final = await send(gw, method, path, { json: payload, headers: { ...bearer(c, token), ...extra } });
    return { first, final, token };
  }

  async function signUp(phone: string, opts: { coolOff: boolean } = { coolOff: true }): Promise<Customer> {
    const device = `dev-${randomUUID().slice(0, 8)}`;
    assert.equal(
      (await send(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId, phone } })).status,
      202,
    );
    const v = await send(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId, phone, otp: await lastCode(phone) },
    });
    assert.equal(v.status, 200, v.text);
    assert.equal(
      (
        await send(gw, 'POST', '/customers/auth/pin/set', {
          json: { tenantId, phone, pin: '4826', verificationToken: v.json.verificationToken },
        })
      ).status,
      204,
    );
    const login = await send(gw, 'POST', '/customers/auth/login', {
      json: { tenantId, phone, pin: '4826' },
      headers: { 'x-device-id': device },
    });
    assert.equal(login.status, 200, login.text);
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const c: Customer = {
      phone,
      device,
      access: login.json.accessToken,
      key: privateKey,
      publicKey: (publicKey.export({ format: 'jwk' }) as { x: string }).x,
      deviceId: '',
      wallet: '',
      id: '',
    };
    const reg = await withStepUp(c, 'POST', '/customers/devices', {
      publicKey: c.publicKey,
      label: 'test phone',
    });
    assert.equal(reg.final.status, 201, reg.final.text);
    c.deviceId = reg.final.json.deviceId;
    // The key waits out its cool-off (24 h; test/e2e/stepup-binding.test.ts); most suites skip it.
    if (opts.coolOff) await coolOff(c);
    const accounts = await send(gw, 'GET', '/v1/accounts', { headers: bearer(c) });
    assert.equal(accounts.status, 200, accounts.text);
    assert.equal(accounts.json.items.length, 1);
    assert.equal(accounts.json.items[0].product_code, 'WALLET_MAIN');
    assert.equal(accounts.json.items[0].currency, 'KES');
    assert.equal(
      accounts.json.items[0].owner.phone,
      `${phone.slice(0, 4)}${'*'.repeat(phone.length - 6)}${phone.slice(-2)}`,
    );
    c.wallet = accounts.json.items[0].id;
    const { rows } = await db.query<{ id: string }>(
      `SELECT id FROM customers WHERE tenant_id = $1 AND phone_e164 = $2`,
      [tenantId, phone],
    );
    c.id = rows[0]?.id ?? '';
    return c;
  }

  /** Add a payee: its own step-up bound to that request (issue 13 item 1). */
  async function addPayee(c: Customer, phone: string, nickname?: string): Promise<Res> {
    return (
      await withStepUp(
        c,
        'POST',
        '/v1/beneficiaries',
        { phone, ...(nickname ? { nickname } : {}) },
        {},
        'device',
      )
    ).final;
  }

  let coreToken = '';
  async function fund(account: string, amount: string): Promise<void> {
    if (!coreToken) {
      const t = await send(gw, 'POST', '/oauth2/token', {
        json: {
          grant_type: 'client_credentials',
          client_id: demo.coreClient.clientId,
          client_secret: demo.coreClient.clientSecret,
          scope: 'core:write',
        },
      });
      assert.equal(t.status, 200, t.text);
      coreToken = t.json.access_token;
    }
    const r = await send(gw, 'POST', '/v1/core/postings', {
      json: {
        currency: 'KES',
        entries: [
          { account_id: demo.settlementAccounts.KES ?? '', side: 'debit', amount },
          { account_id: account, side: 'credit', amount },
        ],
      },
      headers: {
        authorization: `Bearer ${coreToken}`,
        'idempotency-key': `fund-${randomUUID()}`,
        'x-request-id': randomUUID(),
      },
    });
    assert.equal(r.status, 201, r.text);
  }

  async function balance(account: string): Promise<bigint> {
    const { rows } = await db.query<{ posted: string }>(
      'SELECT (credits_posted - debits_posted)::text AS posted FROM ledger_balances WHERE account_id = $1',
      [account],
    );
    const text = rows[0]?.posted ?? '0';
    const p = parseAmount(text.replace(/^-/, ''), { allowZero: true });
    assert.ok(p.ok, text);
    return text.startsWith('-') ? -p.micro : p.micro;
  }

  const intent = (
    c: Customer,
    body: { amount: string; currency: string; beneficiaryId: string },
    payload: string,
  ) => ({
    'x-intent-device-id': c.deviceId,
    'x-intent-signature': sign(
      null,
      Buffer.from(intentPayload({ ...body, orig: origOf('POST', '/v1/transfers', payload) })),
      c.key,
    ).toString('base64url'),
  });

  /** Create a transfer (stepping up as needed) and return the final answer. */
  async function transfer(
    c: Customer,
    beneficiaryId: string,
    amount: string,
    how: 'otp' | 'device' = 'device',
    over: Partial<{ currency: string; payerCustomerId: string }> = {},
  ) {
    const body = {
      amount,
      currency: over.currency ?? 'KES',
      beneficiaryId,
      reference: `ref-${randomUUID().slice(0, 8)}`,
      // A delegated payer's transfer names whose wallet pays (issue 20 item 3).
      ...(over.payerCustomerId ? { payerCustomerId: over.payerCustomerId } : {}),
    };
    const payload = JSON.stringify(body);
    const headers = { ...intent(c, body, payload), 'idempotency-key': `tr-${randomUUID()}` };
    return { ...(await withStepUp(c, 'POST', '/v1/transfers', body, headers, how)), body, headers };
  }

  /** The new key's cool-off has passed (the database is moved on, not the clock). */
  async function coolOff(c: Customer): Promise<void> {
    await db.query('UPDATE customer_devices SET usable_from = now() WHERE id = $1', [c.deviceId]);
  }

  return { lastCode, bearer, stepUp, withStepUp, signUp, addPayee, fund, balance, intent, transfer, coolOff };
}

export type Journey = ReturnType<typeof journey>;
