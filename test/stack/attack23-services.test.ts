/**
 * Outside review of issue 23 (edge and core as separate production services): identity headers
 * sent straight to core, identity headers a client sends through gateway → edge, tenant creation
 * by a non-operator Admin, and configuration an operator could get wrong. Every process is a
 * real OS process in MODE=production on a fresh database.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import { freePort, listen } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { call } from '../helpers/http.ts';
import { key32, productionEnv, runService as run, until, type Service } from '../helpers/services.ts';
import { within } from '../helpers/within.ts';

/** A raw HTTP/1.1 request, so a header can be sent twice. */
function rawGet(port: number, path: string, headers: [string, string][]): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method: 'GET', setHost: true }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    for (const [k, v] of headers) req.appendHeader(k, v);
    req.on('error', reject);
    req.end();
  });
}

async function stop(...ps: Service[]): Promise<void> {
  for (const p of ps) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
  await Promise.all(ps.map((p) => p.exited));
}

/** Exit code within `ms`, or 'running' (then the process is stopped). */
async function exitWithin(p: Service, ms: number): Promise<number | null | 'running'> {
  const r = await within(p.exited, ms);
  if (r !== 'overdue') return r;
  await stop(p);
  return 'running';
}

describe('attack23: identity headers and tenant creation, production processes', () => {
  let t: TestDb;
  let env: Record<string, string>;
  let adminToken: string;
  let core: Service;
  let edge: Service;
  let gateway: Service;
  let recordingGateway: Service;
  let corePort: number;
  let gatewayPort: number;
  let recordingGatewayPort: number;
  let authzPort: number;
  let recorderPort: number;
  const dataDir = join(tmpdir(), `attack23-${randomUUID()}`);
  const seen: IncomingHttpHeaders[] = [];
  const texts: string[] = [];
  const smsReceiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      texts.push(body);
      res.writeHead(204).end();
    });
  });
  const recorder = createServer((req, res) => {
    seen.push(req.headers);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
  });

  before(async () => {
    t = await freshDatabase();
    const smsPort = await listen(smsReceiver, 0, '127.0.0.1');
    // Debug logging, as an operator chasing a problem would run it: still no code may appear.
    env = {
      ...productionEnv(t.url, `http://127.0.0.1:${smsPort}/sms`),
      DATA_DIR: dataDir,
      LOG_LEVEL: 'debug',
    };
    const boot = run('bootstrap', {
      ...env,
      BOOTSTRAP_TENANT_ID: 'op',
      BOOTSTRAP_COUNTRY: 'KE',
      BOOTSTRAP_CURRENCY: 'KES',
    });
    assert.equal(await boot.exited, 0, boot.output());
    adminToken = /Bearer (svc_\S+)/.exec(boot.output())?.[1] as string;
    assert.ok(adminToken);
    [corePort, gatewayPort, recordingGatewayPort] = [await freePort(), await freePort(), await freePort()];
    authzPort = await freePort();
    const metricsPort = await freePort();
    recorderPort = await listen(recorder, 0, '127.0.0.1');
    core = run('core', { ...env, CORE_PORT: String(corePort) });
    // The edge is given no MASTER_KEY at all.
    const { MASTER_KEY: _unused, ...edgeEnv } = env;
    edge = run('edge', { ...edgeEnv, AUTHZ_PORT: String(authzPort), EDGE_METRICS_PORT: String(metricsPort) });
    gateway = run('gateway', {
      MODE: 'production',
      GATEWAY_PORT: String(gatewayPort),
      AUTHZ_ADDRESSES: `127.0.0.1:${authzPort}`,
      CORE_ORIGINS: `http://127.0.0.1:${corePort}`,
    });
    recordingGateway = run('gateway', {
      MODE: 'production',
      GATEWAY_PORT: String(recordingGatewayPort),
      AUTHZ_ADDRESSES: `127.0.0.1:${authzPort}`,
      CORE_ORIGINS: `http://127.0.0.1:${recorderPort}`,
    });
    await until(
      async () =>
        (await call(`http://127.0.0.1:${gatewayPort}`, 'GET', '/v1/ready')).status === 200 ? true : undefined,
      60_000,
      () => `the stack (${core.output()} ${edge.output()})`,
    );
    await until(
      async () =>
        (await call(`http://127.0.0.1:${recordingGatewayPort}`, 'GET', '/v1/health')).status === 200
          ? true
          : undefined,
      30_000,
      'recording gateway',
    );
  });

  after(async () => {
    await stop(recordingGateway, gateway, edge, core);
    recorder.close();
    smsReceiver.close();
    await t.drop();
  });

  it('production processes write nothing into DATA_DIR', () => {
    assert.ok(
      !existsSync(dataDir) || readdirSync(dataDir).length === 0,
      `DATA_DIR holds ${existsSync(dataDir) ? readdirSync(dataDir).join(', ') : ''}`,
    );
  });

  it('a POST whose core dies mid-request is not delivered to another core', async () => {
    // The first core reads the request, then its connection dies before any answer.
    const dying = createTcpServer((s) => s.once('data', () => s.destroy()));
    const dyingPort = await listen(dying, 0, '127.0.0.1');
    const port = await freePort();
    const gw = run('gateway', {
      MODE: 'production',
      GATEWAY_PORT: String(port),
      AUTHZ_ADDRESSES: `127.0.0.1:${authzPort}`,
      CORE_ORIGINS: `http://127.0.0.1:${dyingPort},http://127.0.0.1:${recorderPort}`,
    });
    try {
      await until(
        async () =>
          (await call(`http://127.0.0.1:${port}`, 'GET', '/v1/health')).status > 0 ? true : undefined,
        30_000,
        'gateway',
      );
      for (let i = 0; i < 4; i++) {
        seen.length = 0;
        const id = `twice-${i}`;
        const r = await call(`http://127.0.0.1:${port}`, 'POST', '/v1/tenants', {
          headers: {
            authorization: `Bearer ${adminToken}`,
            'idempotency-key': randomUUID(),
            'x-request-id': id,
          },
          json: { id: `t${i}x`, name: 'X', country: 'KE', baseCurrency: 'KES' },
        });
        const delivered = seen.filter((h) => h['x-request-id'] === id).length;
        assert.ok(delivered <= 1, `delivered ${delivered} times`);
        if (r.status !== 200)
          assert.equal(delivered, 0, `answered ${r.status} yet delivered to the second core`);
      }
    } finally {
      await stop(gw);
      dying.close();
    }
  });

  it('every edge down: 503 and nothing forwarded', async () => {
    const port = await freePort();
    const gw = run('gateway', {
      MODE: 'production',
      GATEWAY_PORT: String(port),
      AUTHZ_ADDRESSES: `127.0.0.1:${await freePort()},127.0.0.1:${await freePort()}`,
      CORE_ORIGINS: `http://127.0.0.1:${recorderPort}`,
    });
    try {
      const r = await until(
        async () => {
          const x = await call(`http://127.0.0.1:${port}`, 'GET', '/v1/health');
          return x.status > 0 ? x : undefined;
        },
        30_000,
        'gateway',
      );
      seen.length = 0;
      const p = await call(`http://127.0.0.1:${port}`, 'POST', '/v1/tenants', {
        headers: { authorization: `Bearer ${adminToken}` },
        json: {},
      });
      assert.equal(r.status, 503);
      assert.equal(p.status, 503);
      assert.equal(seen.length, 0);
    } finally {
      await stop(gw);
    }
  });

  it('an OTP and the verification token it buys appear in no process output and no response but the SMS', async () => {
    const gw = `http://127.0.0.1:${gatewayPort}`;
    const phone = '+254712345678';
    const sent = await callRetrying(gw, 'POST', '/customers/auth/otp/send', {
      json: { tenantId: 'op', phone },
    });
    assert.equal(sent.status, 202, sent.text);
    const text = await until(
      async () => texts.find((b) => b.includes(phone.slice(1)) || b.includes(phone)),
      20_000,
      'the SMS',
    );
    const code = /\b(\d{6})\b/.exec(JSON.parse(text).text)?.[1] as string;
    assert.ok(code, text);
    assert.ok(!sent.text.includes(code));
    // A fail-closed 503 under load (the edge's 100 ms deadline) never reached core: retried.
    const v = await callRetrying(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId: 'op', phone, otp: code },
    });
    assert.equal(v.status, 200, v.text);
    const token = v.json.verificationToken as string;
    for (const p of [core, edge, gateway]) {
      assert.ok(!p.output().includes(code), `${p.kind} logged the OTP`);
      assert.ok(!p.output().includes(token), `${p.kind} logged the verification token`);
      assert.ok(!p.output().includes(adminToken), `${p.kind} logged the admin token`);
      for (const name of [
        'EDGE_SHARED_SECRET',
        'MASTER_KEY',
        'CHALLENGE_KEY',
        'API_KEY_SEAL_KEY',
        'SMS_WEBHOOK_SECRET',
      ]) {
        assert.ok(!p.output().includes(env[name] as string), `${p.kind} logged ${name}`);
      }
      assert.ok(p.output().length > 0, `${p.kind} logged at debug (so the search means something)`);
    }
  });

  it('a step-up challenge is no access token, and an access token is no challenge', async () => {
    const gw = `http://127.0.0.1:${gatewayPort}`;
    const phone = '+254712345679';
    assert.equal(
      (await callRetrying(gw, 'POST', '/customers/auth/otp/send', { json: { tenantId: 'op', phone } }))
        .status,
      202,
    );
    const text = await until(async () => texts.find((b) => b.includes(phone)), 20_000, 'the SMS');
    const code = /\b(\d{6})\b/.exec(JSON.parse(text).text)?.[1] as string;
    const v = await callRetrying(gw, 'POST', '/customers/auth/otp/verify', {
      json: { tenantId: 'op', phone, otp: code },
    });
    assert.equal(
      (
        await callRetrying(gw, 'POST', '/customers/auth/pin/set', {
          json: { tenantId: 'op', phone, pin: '4826', verificationToken: v.json.verificationToken },
        })
      ).status,
      204,
    );
    const login = await callRetrying(gw, 'POST', '/customers/auth/login', {
      json: { tenantId: 'op', phone, pin: '4826' },
      headers: { 'x-device-id': 'dev-a23' },
    });
    assert.equal(login.status, 200, login.text);
    const access = login.json.accessToken as string;
    const auth = (tok: string) => ({ authorization: `Bearer ${tok}`, 'x-device-id': 'dev-a23' });
    // A fail-closed 503 under load (the edge's 100 ms deadline) never reached core: retried.
    const control = await callRetrying(gw, 'GET', '/v1/accounts', { headers: auth(access) });
    assert.equal(control.status, 200, `control: the access token works (${control.text})`);
    const mfa = await callRetrying(gw, 'POST', '/customers/devices', {
      json: { publicKey: 'A'.repeat(43), label: 'x' },
      headers: auth(access),
    });
    assert.equal(mfa.status, 403, mfa.text);
    const challenge = mfa.json.challenge as string;
    assert.ok(challenge);
    const asAccess = await callRetrying(gw, 'GET', '/v1/accounts', { headers: auth(challenge) });
    assert.equal(asAccess.status, 401, `challenge as access token: ${asAccess.status} ${asAccess.text}`);
    const asChallenge = await callRetrying(gw, 'POST', '/customers/auth/stepup/otp', {
      json: { challengeToken: access },
      headers: auth(access),
    });
    assert.ok(
      asChallenge.status >= 400 && asChallenge.status < 500,
      `access token as challenge: ${asChallenge.status} ${asChallenge.text}`,
    );
    const complete = await callRetrying(gw, 'POST', '/customers/auth/stepup/complete', {
      json: { challengeToken: access, otp: '000000' },
      headers: auth(access),
    });
    assert.ok(
      complete.status >= 400 && complete.status < 500,
      `access token completes no step-up: ${complete.status}`,
    );
  });

  const identity = {
    'x-request-id': 'attack-1',
    'x-tenant-id': 'op',
    'x-principal-id': 'svc:intruder',
    'x-roles': 'admin',
    'x-purpose': 'operational',
    'x-aal': '2',
  };

  it('core honours identity headers only with the exact current secret', async () => {
    const secret = env.EDGE_SHARED_SECRET as string;
    const direct = (edgeAuth?: string) =>
      call(`http://127.0.0.1:${corePort}`, 'GET', '/v1/tenants', {
        headers: { ...identity, ...(edgeAuth === undefined ? {} : { 'x-edge-auth': edgeAuth }) },
      });
    // Control: the real secret is what makes a direct call an identified one (so this test can fail).
    const control = await direct(secret);
    assert.equal(control.status, 200, control.text);
    const variants: Record<string, string | undefined> = {
      none: undefined,
      empty: '',
      wrong: randomBytes(32).toString('base64url'),
      truncated: secret.slice(0, -1),
      prefix: secret.slice(0, 16),
      extended: `${secret}x`,
      upper: secret.toUpperCase(),
      lower: secret.toLowerCase(),
    };
    for (const [name, value] of Object.entries(variants)) {
      if (value === secret) continue;
      const r = await direct(value);
      assert.ok(r.status === 401 || r.status === 403, `${name}: refused (${r.status})`);
    }
    const twice = await rawGet(corePort, '/v1/tenants', [
      ...Object.entries(identity),
      ['x-edge-auth', secret],
      ['x-edge-auth', secret],
    ]);
    assert.ok(twice === 401 || twice === 403, `duplicated secret refused (${twice})`);
    const wrongThenRight = await rawGet(corePort, '/v1/tenants', [
      ...Object.entries(identity),
      ['x-edge-auth', 'nope'],
      ['x-edge-auth', secret],
    ]);
    assert.ok(
      wrongThenRight === 401 || wrongThenRight === 403,
      `wrong then right refused (${wrongThenRight})`,
    );
  });

  it('the edge removes every identity header a client sends, whatever the credential', async () => {
    const forged = {
      'x-edge-auth': env.EDGE_SHARED_SECRET as string,
      'x-tenant-id': 'forged-tenant',
      'x-principal-id': 'forged',
      'x-session-id': 'forged',
      'x-roles': 'admin,platform',
      'x-scopes': 'everything',
      'x-aal': '3',
      'x-purpose': 'forged',
      'x-masking': 'none',
      'x-credential': 'forged',
      'x-budget-counted': '999999',
      'x-client-ip': '10.9.9.9',
      'x-decision-id': 'forged',
      'x-policy-version': 'forged',
      'x-registry-version': 'forged',
      'x-req-id': 'forged',
      'x-api-key-secret': 'forged',
    };
    for (const [what, extra] of [
      ['anonymous', {}],
      ['service token', { authorization: `Bearer ${adminToken}` }],
    ] as const) {
      seen.length = 0;
      const path = what === 'anonymous' ? '/v1/health' : '/v1/tenants';
      // Retried on a missed decision deadline (503 authz_unavailable) as every gateway call is
      // under load; a refused try never reaches the recorder, so `seen[0]` is the answered one.
      const r = await callRetrying(`http://127.0.0.1:${recordingGatewayPort}`, 'GET', path, {
        headers: { ...forged, ...extra },
      });
      assert.equal(r.status, 200, `${what}: ${r.text}`);
      const h = seen[0];
      assert.ok(h, `${what}: reached the recorder`);
      assert.notEqual(h['x-edge-auth'], undefined, `${what}: the edge's own secret is set`);
      for (const [name, value] of Object.entries(forged)) {
        if (name === 'x-edge-auth') continue;
        assert.notEqual(h[name], value, `${what}: client-sent ${name} is not forwarded`);
      }
    }
  });

  it("a non-operator tenant's Admin cannot create a tenant through the gateway", async () => {
    const gw = `http://127.0.0.1:${gatewayPort}`;
    const created = await callRetrying(gw, 'POST', '/v1/tenants', {
      headers: { authorization: `Bearer ${adminToken}`, 'idempotency-key': randomUUID() },
      json: { id: 'other', name: 'Other', country: 'KE', baseCurrency: 'KES' },
    });
    assert.equal(created.status, 201, created.text);
    const otherToken = await t.db.tx((q) => putServiceToken(q, 'other', 'other-admin', ['admin']));
    const refused = await callRetrying(gw, 'POST', '/v1/tenants', {
      headers: { authorization: `Bearer ${otherToken}`, 'idempotency-key': randomUUID() },
      json: { id: 'third', name: 'Third', country: 'KE', baseCurrency: 'KES' },
    });
    assert.equal(refused.status, 403, refused.text);
    const { rowCount } = await t.db.query(`SELECT 1 FROM tenants WHERE id = 'third'`);
    assert.equal(rowCount, 0);
  });

  it('the previous secret works while listed and not after it is removed from configuration', async () => {
    const previous = randomBytes(32).toString('base64url');
    const port = await freePort();
    const rotating = run('core', { ...env, CORE_PORT: String(port), EDGE_SHARED_SECRET_PREVIOUS: previous });
    try {
      const ok = await until(
        async () => {
          const r = await call(`http://127.0.0.1:${port}`, 'GET', '/v1/tenants', {
            headers: { ...identity, 'x-edge-auth': previous },
          });
          return r.status === 200 ? r : undefined;
        },
        60_000,
        () => `rotating core (${rotating.output()})`,
      );
      assert.equal(ok.status, 200);
    } finally {
      await stop(rotating);
    }
    const after = run('core', { ...env, CORE_PORT: String(port) });
    try {
      await until(
        async () =>
          (await call(`http://127.0.0.1:${port}`, 'GET', '/v1/health')).status === 200 ? true : undefined,
        60_000,
        'core',
      );
      const r = await call(`http://127.0.0.1:${port}`, 'GET', '/v1/tenants', {
        headers: { ...identity, 'x-edge-auth': previous },
      });
      assert.ok(r.status === 401 || r.status === 403, `removed previous secret refused (${r.status})`);
    } finally {
      await stop(after);
    }
  });
});

describe('attack23: configuration an operator gets wrong', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());
  const base = () => ({ ...productionEnv(t.url), CORE_PORT: '0' });
  const cases: [string, Record<string, string>, RegExp][] = [
    ['a 31-character shared secret', { EDGE_SHARED_SECRET: 's'.repeat(31) }, /EDGE_SHARED_SECRET/],
    ['a shared secret of 32 spaces', { EDGE_SHARED_SECRET: ' '.repeat(32) }, /EDGE_SHARED_SECRET/],
    [
      'a shared secret with surrounding whitespace',
      { EDGE_SHARED_SECRET: ` ${'s'.repeat(40)} ` },
      /EDGE_SHARED_SECRET/,
    ],
    [
      'a shared secret with a character no header may carry',
      { EDGE_SHARED_SECRET: `${'s'.repeat(40)}\u00e9` },
      /EDGE_SHARED_SECRET/,
    ],
    ['a malformed master key', { MASTER_KEY: 'not-base64' }, /MASTER_KEY/],
    ['a challenge key list with an empty entry', { CHALLENGE_KEY: `${key32()},` }, /CHALLENGE_KEY/],
    ['a challenge key list with a short entry', { CHALLENGE_KEY: `${key32()},AAAA` }, /CHALLENGE_KEY/],
    [
      'a private-target list with a bad CIDR',
      { PRIVATE_TARGETS_ALLOWED: '127.0.0.1/33' },
      /PRIVATE_TARGETS_ALLOWED/,
    ],
    [
      'a missing trusted-keys file',
      { POLICY_TRUSTED_KEYS: '/nonexistent/keys.json' },
      /POLICY_TRUSTED_KEYS|trusted|keys/i,
    ],
  ];
  for (const [what, bad, names] of cases) {
    it(`core refuses ${what} in one line, no stack trace, no value echoed`, async () => {
      const p = run('core', { ...base(), ...bad });
      const code = await exitWithin(p, 20_000);
      assert.notEqual(code, 'running', `${what}: core kept running (${p.output()})`);
      assert.notEqual(code, 0);
      assert.match(p.output(), names, p.output());
      assert.doesNotMatch(p.output(), /\n\s+at /, 'no stack trace');
      for (const [k, v] of Object.entries(bad))
        if (/SECRET|KEY$/.test(k) && k !== 'POLICY_TRUSTED_KEYS' && v.trim().length >= 8)
          assert.ok(!p.output().includes(v.trim()), `${what}: value not echoed`);
    });
  }
});

describe('attack23: webhook target guard with PRIVATE_TARGETS_ALLOWED', () => {
  it('refuses cloud metadata addresses even inside a listed private range', async () => {
    const { TargetGuard } = await import('../../core/admin/webhooks/target.ts');
    const guard = new TargetGuard({ allowedCidrs: ['fd00::/8', '169.254.0.0/16', '10.0.0.0/8'] });
    // AWS (IPv4 and IPv6), ECS, GCP over IPv6 (fd20:ce::254), mapped and NAT64 spellings.
    for (const ip of [
      '169.254.169.254',
      '169.254.170.2',
      'fd00:ec2::254',
      'fd20:ce::254',
      '::ffff:a9fe:a9fe',
      '64:ff9b::a9fe:a9fe',
    ]) {
      assert.equal(guard.refusalOf(ip), 'metadata', ip);
    }
    assert.equal(guard.refusalOf('192.168.1.1'), 'private', 'an unlisted private address');
    const named = new TargetGuard({
      allowedCidrs: ['fd00::/8'],
      lookup: async () => [{ address: 'fd20:ce::254', family: 6 }],
    });
    await assert.rejects(named.check(new URL('http://sms.internal.example/')), /metadata/);
  });
});
