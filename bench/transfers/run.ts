/**
 * Customer journey benchmark (issue 7; SPEC 8: full login with step-up p95 < 1.5 s, step-up
 * p95 < 800 ms with a device signature). The whole stack through the dev gateway, on an
 * embedded PostgreSQL in a temporary directory; 8 customers at once, each repeating
 * login → transfer (403 MFA_REQUIRED) → step-up (device signature, or an SMS code every other
 * round) → repeat → confirm.
 *
 *   npx tsx bench/transfers/run.ts [--rounds 5] [--customers 8]
 *
 * Prints p50/p95/p99 per step and for the whole flow; asserts nothing.
 */
import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';
import { loadConfig } from '../../bin/config.ts';
import { startStack } from '../../bin/stack.ts';
import type { Db } from '../../shared/db/pool.ts';
import { origOf } from '../../shared/challenge.ts';
import { intentPayload } from '../../core/payments/transfers.ts';
import { option, percentile, runBench } from '../lib/harness.ts';
import { showingLoad } from '../lib/probe.ts';

const rounds = option('rounds', 5);
const customers = option('customers', 8);

let gw = '';
let dataDir = '';
let db: Db | undefined;

/**
 * Each customer calls from its own loopback address, as real customers come from their own
 * phones: per-address lockout (SPEC 8) would otherwise count all of them as one source.
 */
const agents = new Map<number, http.Agent>();
let current = 0;
function agentFor(i: number): http.Agent {
  let a = agents.get(i);
  if (!a) {
    a = new http.Agent({
      keepAlive: true,
      localAddress: `127.0.${Math.floor(i / 200) + 1}.${(i % 200) + 10}`,
    } as http.AgentOptions);
    agents.set(i, a);
  }
  return a;
}

function call(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
  who = current,
): Promise<{ status: number; json: any }> {
  const payload = body !== undefined ? JSON.stringify(body) : undefined;
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${gw}${path}`,
      {
        method,
        agent: agentFor(who),
        headers: {
          ...(payload !== undefined
            ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) }
            : {}),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : undefined });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

function callAs(
  i: number,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  return call(method, path, body, headers, i);
}

function must(r: { status: number; json: any }, status: number, what: string): any {
  if (r.status !== status) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json;
}

async function code(phone: string): Promise<string> {
  const lines = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { to: string; code?: string });
  return lines.filter((l) => l.to === phone && l.code).at(-1)?.code ?? '';
}

interface Who {
  phone: string;
  device: string;
  key: KeyObject;
  deviceId: string;
  wallet: string;
  payee: string;
}

async function signUp(i: number): Promise<Who> {
  const phone = `+2547220${String(i).padStart(5, '0')}`;
  const device = `bench-${i}`;
  must(await call('POST', '/customers/auth/otp/send', { tenantId: 'demo', phone }), 202, 'otp send');
  const v = must(
    await call('POST', '/customers/auth/otp/verify', { tenantId: 'demo', phone, otp: await code(phone) }),
    200,
    'otp verify',
  );
  must(
    await call('POST', '/customers/auth/pin/set', {
      tenantId: 'demo',
      phone,
      pin: '4826',
      verificationToken: v.verificationToken,
    }),
    204,
    'pin set',
  );
  const login = must(
    await call(
      'POST',
      '/customers/auth/login',
      { tenantId: 'demo', phone, pin: '4826' },
      { 'x-device-id': device },
    ),
    200,
    'login',
  );
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const reg = { publicKey: (publicKey.export({ format: 'jwk' }) as { x: string }).x };
  const auth = { authorization: `Bearer ${login.accessToken}`, 'x-device-id': device };
  const first = await call('POST', '/customers/devices', reg, auth);
  must(
    await call('POST', '/customers/auth/stepup/otp', { challengeToken: first.json.challenge }, auth),
    202,
    'step-up otp',
  );
  const up = must(
    await call(
      'POST',
      '/customers/auth/stepup/complete',
      { challengeToken: first.json.challenge, otp: await code(phone) },
      auth,
    ),
    200,
    'step-up',
  );
  const dev = must(
    await call('POST', '/customers/devices', reg, { ...auth, authorization: `Bearer ${up.accessToken}` }),
    201,
    'device',
  );
  // A new key waits out its cool-off (24 h by default) before it may step up or sign: the
  // benchmark measures the journey after that, so the wait is moved into the past.
  await db?.query('UPDATE customer_devices SET usable_from = now() WHERE id = $1', [dev.deviceId]);
  const wallet = must(await call('GET', '/v1/accounts', undefined, auth), 200, 'accounts').items[0]
    .id as string;
  return { phone, device, key: privateKey, deviceId: dev.deviceId, wallet, payee: '' };
}

const pct = (v: number[], p: number) =>
  percentile(
    [...v].sort((a, b) => a - b),
    p,
  );

type Call = (m: string, p: string, b?: unknown, h?: Record<string, string>) => ReturnType<typeof callAs>;

interface Demo {
  coreClient: { clientId: string; clientSecret: string };
  settlementAccounts: { KES: string };
}

/** The customer's PIN login from its bound device. */
async function pinLogin(call: Call, w: Who) {
  return must(
    await call(
      'POST',
      '/customers/auth/login',
      { tenantId: 'demo', phone: w.phone, pin: '4826' },
      { 'x-device-id': w.device },
    ),
    200,
    'login',
  );
}

/** Customer i's wallet funded by the core client, and its payee (the next customer) added after a step-up. */
async function prepare(i: number, who: Who[], demo: Demo, coreToken: string): Promise<void> {
  const w = who[i] as Who;
  must(
    await call(
      'POST',
      '/v1/core/postings',
      {
        currency: 'KES',
        entries: [
          { account_id: demo.settlementAccounts.KES, side: 'debit', amount: '100000.00' },
          { account_id: w.wallet, side: 'credit', amount: '100000.00' },
        ],
      },
      { authorization: `Bearer ${coreToken}`, 'idempotency-key': `fund-${randomUUID()}` },
    ),
    201,
    'fund',
  );
  const other = who[(i + 1) % who.length] as Who;
  const login = await pinLogin(call, w);
  const auth = { authorization: `Bearer ${login.accessToken}`, 'x-device-id': w.device };
  const c = await call('POST', '/v1/beneficiaries', { phone: other.phone }, auth);
  const up =
    c.status === 403
      ? must(
          await call(
            'POST',
            '/customers/auth/stepup/complete',
            {
              challengeToken: c.json.challenge,
              deviceAssertion: {
                deviceId: w.deviceId,
                signature: sign(null, Buffer.from(c.json.challenge), w.key).toString('base64url'),
              },
            },
            auth,
          ),
          200,
          'step-up',
        )
      : undefined;
  w.payee = must(
    await call(
      'POST',
      '/v1/beneficiaries',
      { phone: other.phone },
      { ...auth, authorization: `Bearer ${up?.accessToken ?? login.accessToken}` },
    ),
    201,
    'payee',
  ).id;
}

interface Timings {
  login: number[];
  stepUp: number[];
  stepUpOtp: number[];
  loginStepUp: number[];
  loginStepUpOtp: number[];
  transfer: number[];
  confirm: number[];
  flow: number[];
}

const msSince = (from: bigint) => Number(process.hrtime.bigint() - from) / 1e6;

/** A transfer of 10.00 to the payee, with its intent signed by the device key (SPEC 4.3). */
function signedTransfer(w: Who) {
  const body = {
    amount: '10.00',
    currency: 'KES',
    beneficiaryId: w.payee,
    reference: `b-${randomUUID().slice(0, 8)}`,
  };
  const payload = JSON.stringify(body);
  const headers = {
    'x-intent-device-id': w.deviceId,
    'idempotency-key': `tr-${randomUUID()}`,
    'x-intent-signature': sign(
      null,
      Buffer.from(intentPayload({ ...body, orig: origOf('POST', '/v1/transfers', payload) })),
      w.key,
    ).toString('base64url'),
  };
  return { body, headers };
}

/** The step-up answering `challenge`: by the device key, or by an SMS code read from the dev outbox. */
async function stepUp(call: Call, w: Who, challenge: string, auth: Record<string, string>, viaOtp: boolean) {
  if (viaOtp)
    must(
      await call('POST', '/customers/auth/stepup/otp', { challengeToken: challenge }, auth),
      202,
      'step-up otp',
    );
  const proof = viaOtp
    ? { otp: await code(w.phone) }
    : {
        deviceAssertion: {
          deviceId: w.deviceId,
          signature: sign(null, Buffer.from(challenge), w.key).toString('base64url'),
        },
      };
  return must(
    await call('POST', '/customers/auth/stepup/complete', { challengeToken: challenge, ...proof }, auth),
    200,
    'step-up',
  );
}

/** Round r of customer i: login, the transfer refused for MFA, the step-up, the transfer again, its confirmation. */
async function flowRound(i: number, w: Who, r: number, t: Timings): Promise<void> {
  const call: Call = (m, p, b, h = {}) => callAs(i, m, p, b, h);
  const flow = process.hrtime.bigint();
  let at = process.hrtime.bigint();
  const login = await pinLogin(call, w);
  t.login.push(msSince(at));
  const auth = { authorization: `Bearer ${login.accessToken}`, 'x-device-id': w.device };
  const { body, headers } = signedTransfer(w);
  at = process.hrtime.bigint();
  const first = await call('POST', '/v1/transfers', body, { ...auth, ...headers });
  if (first.status !== 403) throw new Error(`expected MFA_REQUIRED, got ${first.status}`);
  // Issue 18 item 4: every other round steps up with an SMS code instead of the device key
  // (SPEC 8 sets a target for each): the code is sent, read from the dev outbox, entered.
  const viaOtp = r % 2 === 1;
  const up = await stepUp(call, w, first.json.challenge as string, auth, viaOtp);
  (viaOtp ? t.stepUpOtp : t.stepUp).push(msSince(at));
  (viaOtp ? t.loginStepUpOtp : t.loginStepUp).push(msSince(flow));
  const stepped = { ...auth, authorization: `Bearer ${up.accessToken}` };
  at = process.hrtime.bigint();
  const created = must(
    await call('POST', '/v1/transfers', body, { ...stepped, ...headers }),
    200,
    'transfer',
  );
  t.transfer.push(msSince(at));
  at = process.hrtime.bigint();
  must(
    await call(
      'POST',
      '/v1/transfers/confirm',
      { transferId: created.id },
      { ...stepped, 'idempotency-key': `cf-${randomUUID()}` },
    ),
    200,
    'confirm',
  );
  t.confirm.push(msSince(at));
  t.flow.push(msSince(flow));
}

/** Each step's percentiles against SPEC 8's targets, and the flows per second. */
function printTimings(t: Timings, seconds: number): void {
  const line = (name: string, v: number[]) =>
    `${name.padEnd(44)} p50 ${pct(v, 50).toFixed(0).padStart(5)} ms  p95 ${pct(v, 95).toFixed(0).padStart(5)} ms  p99 ${pct(v, 99).toFixed(0).padStart(5)} ms  n=${v.length}`;
  process.stdout.write(
    `${customers} customers × ${rounds} rounds through the gateway (${(t.flow.length / seconds).toFixed(1)} flows/s)\n`,
  );
  process.stdout.write(`${line('login (argon2id PIN)', t.login)}\n`);
  process.stdout.write(
    `${line('transfer → MFA_REQUIRED → device step-up', t.stepUp)}  (target p95 < 800 ms)\n`,
  );
  process.stdout.write(
    `${line('transfer → MFA_REQUIRED → SMS code step-up', t.stepUpOtp)}  (target p95 < 1500 ms)\n`,
  );
  process.stdout.write(`${line('login + device step-up', t.loginStepUp)}  (target p95 < 1500 ms)\n`);
  process.stdout.write(`${line('login + SMS code step-up', t.loginStepUpOtp)}  (target p95 < 1500 ms)\n`);
  process.stdout.write(`${line('repeated transfer (hold)', t.transfer)}\n`);
  process.stdout.write(`${line('confirm (capture)', t.confirm)}\n`);
  process.stdout.write(
    `${line('whole flow: login + step-up + transfer + confirm', t.flow)}  (target p95 < 1500 ms)\n`,
  );
}

async function main(): Promise<void> {
  dataDir = await mkdtemp(join(tmpdir(), 'bench-transfers-'));
  const stack = await startStack(
    loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
    }),
  );
  gw = `http://127.0.0.1:${stack.ports.gateway}`;
  db = stack.db;
  try {
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Demo;
    const who: Who[] = [];
    for (let i = 0; i < customers; i++) {
      current = i;
      who.push(await signUp(i));
    }
    const core = must(
      await call('POST', '/oauth2/token', {
        grant_type: 'client_credentials',
        client_id: demo.coreClient.clientId,
        client_secret: demo.coreClient.clientSecret,
        scope: 'core:write',
      }),
      200,
      'token',
    );
    for (const i of who.keys()) {
      current = i;
      await prepare(i, who, demo, core.access_token);
    }
    const t: Timings = {
      login: [],
      stepUp: [],
      stepUpOtp: [],
      loginStepUp: [],
      loginStepUpOtp: [],
      transfer: [],
      confirm: [],
      flow: [],
    };
    const started = process.hrtime.bigint();
    await Promise.all(
      who.map(async (w, i) => {
        for (let r = 0; r < rounds; r++) await flowRound(i, w, r, t);
      }),
    );
    printTimings(t, Number(process.hrtime.bigint() - started) / 1e9);
  } finally {
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

runBench(() => showingLoad(main));
