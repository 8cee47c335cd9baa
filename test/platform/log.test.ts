import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { defineRoute } from '../../core/http/route.ts';
import { createHandler } from '../../core/http/server.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, serve } from '../helpers/http.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';

function capture(): { stream: Writable; lines: string[]; text(): string; json(): Record<string, any>[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(c, _e, cb) {
      lines.push(String(c));
      cb();
    },
  });
  return {
    stream,
    lines,
    text: () => lines.join(''),
    json: () =>
      lines
        .join('')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l)),
  };
}
/** `value` as a whole token: not inside a longer run of digits or word characters. */
const token = (value: string) =>
  new RegExp(`(?<![0-9A-Za-z])${value.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![0-9A-Za-z])`);

/**
 * Issue 13 item 9: what the stack logs for a sign-up, an OTP send, logins and refusals carries
 * the deny codes and no PIN, OTP, token or secret; phones are masked (SPEC 2.5).
 */
describe('logs of the whole stack at trace level', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  const out = capture();
  const phone = '+254700555123';

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'log-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'trace',
    });
    stack = await startStack(config, {
      checkResponses: true,
      checkTimeoutMs: 3000,
      logDestination: out.stream,
    });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('an OTP send, a failed and a good login, refusals: codes logged, secrets not, phones masked', async () => {
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8'));
    const pin = '739164';
    assert.equal(
      (await call(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId: 'demo', phone } })).status,
      202,
    );
    const sms = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((l) => l.to === phone);
    const otp = String(sms.at(-1)?.code);
    const verified = await call(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId: 'demo', phone, otp },
    });
    assert.equal(verified.status, 200, verified.text);
    const set = await call(gw, 'POST', '/customers/auth/pin/set', {
      json: { tenantId: 'demo', phone, pin, verificationToken: verified.json.verificationToken },
    });
    assert.equal(set.status, 204, set.text);
    const wrong = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin: '902817' },
    });
    assert.equal(wrong.json.code, 'INVALID_CREDENTIALS');
    const login = await call(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'demo', phone, pin },
      headers: { cookie: 'sid=cookie-secret-value' },
    });
    assert.equal(login.status, 200, login.text);
    const sessions = await call(gw, 'GET', '/customers/sessions', {
      headers: { authorization: `Bearer ${login.json.accessToken}` },
    });
    assert.equal(sessions.status, 200, sessions.text);
    const denied = await call(gw, 'GET', '/customers/sessions');
    assert.equal(denied.json.code, 'UNAUTHENTICATED');
    const staff = await call(gw, 'GET', '/v1/countries', {
      headers: { authorization: `Bearer ${demo.serviceTokens.readOnly.token}`, 'x-request-id': 'log-staff' },
    });
    assert.equal(staff.status, 200, staff.text);
    await new Promise((r) => setTimeout(r, 50));

    const text = out.text();
    const lines = out.json();
    for (const [what, secret] of Object.entries({
      otp,
      pin,
      wrongPin: '902817',
      verificationToken: verified.json.verificationToken,
      accessToken: login.json.accessToken,
      refreshToken: login.json.refreshToken,
      serviceToken: demo.serviceTokens.readOnly.token,
      cookie: 'cookie-secret-value',
    }))
      assert.doesNotMatch(text, token(String(secret)), `${what} never reaches a log line`);
    assert.doesNotMatch(text, /\+254700555123|254700555123/, 'the phone never appears in clear');
    // Codes are logged as they are: core's refusal and the edge's deny.
    assert.ok(
      lines.some(
        (l) => l.route === '/customers/auth/login' && l.status === 401 && l.code === 'INVALID_CREDENTIALS',
      ),
      'core names the refusal',
    );
    assert.ok(
      lines.some((l) => l.msg === 'decision' && l.code === 'UNAUTHENTICATED'),
      'the edge names its deny code',
    );
    assert.ok(!lines.some((l) => l.code === '[redacted]'), 'no code is redacted');
  });
});

describe('an unexpected database error in the log', () => {
  let tdb: TestDb;
  let close: () => Promise<void>;
  let origin: string;
  const out = capture();

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('tl', 'tl', 'KE', 'KES')`,
    );
    await tdb.db.query(
      `INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES (gen_random_uuid(), 'tl', '+254711222333', now())`,
    );
    // A handler bug: inserting a customer twice. PostgreSQL quotes the phone in the error detail.
    const routes = [
      defineRoute({
        method: 'POST',
        path: '/v1/dup',
        operationId: 'dup',
        summary: 's',
        tags: ['t'],
        responses: { 201: { description: 'made' } },
        handler: async () => {
          await tdb.db.query(
            `INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES (gen_random_uuid(), 'tl', '+254711222333', now())`,
          );
          return { status: 201, body: {} };
        },
      }),
      defineRoute({
        // A validation gap: the query value reaches PostgreSQL as an int unchecked.
        method: 'GET',
        path: '/v1/cast',
        operationId: 'cast',
        summary: 's',
        tags: ['t'],
        responses: { 200: { description: 'ok' } },
        query: Type.Object({ n: Type.String() }),
        handler: async ({ query }) => ({
          status: 200,
          body: (await tdb.db.query('SELECT $1::int AS n', [query.n])).rows[0],
        }),
      }),
    ];
    const s = await serve(
      createServer(
        createHandler({
          routes,
          log: createLogger('info', out.stream),
          metrics: createMetrics(),
          edgeSecrets: testEdgeSecrets,
        }),
      ),
    );
    origin = s.origin;
    close = s.close;
  });
  after(async () => {
    await close?.();
    await tdb?.drop();
  });

  it('carries the SQLSTATE and the error detail with the phone masked; the answer stays generic', async () => {
    const r = await call(origin, 'POST', '/v1/dup', { headers: { 'x-request-id': 'log-dup' } });
    assert.equal(r.status, 500);
    assert.deepEqual(r.json, { code: 'INTERNAL', message: 'internal error' });
    const line = out.json().find((l) => l.reqId === 'log-dup');
    assert.ok(line, out.text());
    assert.equal(line.code, 'INTERNAL');
    assert.equal(line.err.code, '23505', 'the SQLSTATE');
    assert.match(line.err.detail, /\+254\*{7}33/, 'the phone in the detail, masked');
    assert.doesNotMatch(out.text(), /254711222333/);
  });

  it('a data exception a value in the request caused is 400, and logged with its SQLSTATE as a validation gap', async () => {
    for (const [n, sqlstate] of [
      ['99999999999', '22003'],
      ['twelve', '22P02'],
    ] as const) {
      const r = await call(origin, 'GET', `/v1/cast?n=${n}`, {
        headers: { 'x-request-id': `log-cast-${n}` },
      });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.code, 'VALIDATION_FAILED');
      assert.doesNotMatch(r.text, /integer|syntax|twelve|99999/, 'no database detail in the answer');
      const line = out.json().find((l) => l.reqId === `log-cast-${n}`);
      assert.equal(line?.err?.code, sqlstate, out.text());
    }
    assert.equal((await call(origin, 'GET', '/v1/cast?n=12')).json.n, 12);
  });
});

describe('log redaction by path', () => {
  it('censors secrets wherever they are logged, keeps codes, masks phones in fields and in text', () => {
    const out = capture();
    const log = createLogger('info', out.stream);
    const pgError = Object.assign(new Error('insert failed for +254711000001'), {
      code: '23505',
      detail: 'Key (phone_e164)=(+254711000001) already exists.',
    });
    log.error(
      {
        code: 'POLICY_DENIED',
        err: pgError,
        pin: '1111',
        body: { otp: '222222', newPin: '3333', phone: '+254711000001', customerPhone: '+254722000002' },
        sms: { to: '+254711000001', code: '444444', text: 'Your code is 444444' },
        a: { b: { c: { refreshToken: 'rt-5' } } },
        headers: {
          authorization: 'Bearer t6',
          cookie: 'c7',
          'x-api-key-secret': 's8',
          'x-signature': 'sig9',
          dpop: 'd10',
        },
        req: { headers: { 'proxy-authorization': 'p11' } },
        set: { 'x-edge-auth': 'edge12' },
        path: '/v1/lookup?phone=%2B254733000003',
      },
      'refused +254744000004',
    );
    const [line] = out.json();
    assert.ok(line);
    assert.equal(line.code, 'POLICY_DENIED', 'a deny code is logged');
    assert.equal(line.err.code, '23505', 'a SQLSTATE is logged');
    assert.equal(line.sms.code, '[redacted]', 'an OTP in an SMS is not');
    for (const secret of [
      '1111',
      '222222',
      '3333',
      '444444',
      'rt-5',
      't6',
      'c7',
      's8',
      'sig9',
      'd10',
      'p11',
      'edge12',
    ])
      assert.doesNotMatch(out.text(), token(secret), secret);
    assert.equal(line.body.phone, '+254*******01');
    assert.equal(line.body.customerPhone, '+254*******02');
    assert.equal(line.sms.to, '+254*******01');
    assert.equal(line.err.message, 'insert failed for +254*******01');
    assert.equal(line.err.detail, 'Key (phone_e164)=(+254*******01) already exists.');
    assert.equal(line.path, '/v1/lookup?phone=%2B2*********03');
    assert.equal(line.msg, 'refused +254*******04');
    assert.doesNotMatch(out.text(), /7[1-4][1-4]000000[1-4]/, 'no phone in clear anywhere');
  });
});
