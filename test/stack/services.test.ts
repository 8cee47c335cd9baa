/**
 * The separately deployed processes (`npm run migrate`, `core`, `edge`, `gateway`) in production
 * mode, as an operator runs them: configuration refused with every problem listed, core refusing
 * an unmigrated database, a request through gateway → edge → core, health and readiness, and a
 * clean exit on SIGTERM.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { healthService, ServingStatus } from '../../edge/health.ts';
import { freePort } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';
import { key32 as key, productionEnv, runService as run, until } from '../helpers/services.ts';

describe('services in production mode', () => {
  let t: TestDb;
  let env: Record<string, string>;
  before(async () => {
    t = await freshDatabase({ migrate: false });
    env = productionEnv(t.url);
  });
  after(() => t.drop());

  it('refuses to start without its secrets, listing every one', async () => {
    const p = run('core', { MODE: 'production', DATABASE_URL: t.url });
    assert.equal(await p.exited, 2);
    for (const name of [
      'MASTER_KEY',
      'EDGE_SHARED_SECRET',
      'CHALLENGE_KEY',
      'API_KEY_SEAL_KEY',
      'SMS_WEBHOOK_URL',
      'POLICY_TRUSTED_KEYS',
      'DEPLOYMENT_REGION',
    ]) {
      assert.match(p.output(), new RegExp(name), `names ${name}`);
    }
    assert.doesNotMatch(p.output(), /\n\s+at /, 'no stack trace');
    const e = run('edge', { MODE: 'production', DATABASE_URL: t.url, MASTER_KEY: key() });
    assert.equal(await e.exited, 2);
    assert.match(e.output(), /EDGE_SHARED_SECRET/);
    assert.doesNotMatch(e.output(), /MASTER_KEY/, 'the edge does not read the master key');
  });

  it('refuses a malformed edge shared secret, current or previous, without echoing it', async () => {
    const p = run('core', {
      ...env,
      EDGE_SHARED_SECRET: 'too-short-secret',
      EDGE_SHARED_SECRET_PREVIOUS: `${'p'.repeat(40)},short-previous`,
    });
    assert.equal(await p.exited, 2);
    assert.match(p.output(), /EDGE_SHARED_SECRET: must be at least 32 characters/);
    assert.match(p.output(), /EDGE_SHARED_SECRET_PREVIOUS: must be at least 32 characters/);
    assert.doesNotMatch(p.output(), /too-short-secret|short-previous/, 'the values are not echoed');
  });

  it('core refuses a database that lacks migrations; migrate applies them once', async () => {
    const early = run('core', { ...env, CORE_PORT: '0' });
    assert.equal(await early.exited, 1);
    assert.match(early.output(), /npm run migrate/);
    // Issue 20 item 2: production never guesses where it runs (it would label the cluster).
    const unplaced = run('migrate', { MODE: 'production', DATABASE_URL: t.url });
    assert.equal(await unplaced.exited, 2);
    assert.match(unplaced.output(), /DEPLOYMENT_REGION: required in production/);
    const misplaced = run('core', { ...env, DEPLOYMENT_REGION: 'Kenya', CORE_PORT: '0' });
    assert.equal(await misplaced.exited, 2);
    assert.match(misplaced.output(), /DEPLOYMENT_REGION: must be an ISO 3166 alpha-2 code/);
    const m = run('migrate', { MODE: 'production', DATABASE_URL: t.url, DEPLOYMENT_REGION: 'KE' });
    assert.equal(await m.exited, 0, m.output());
    assert.match(m.output(), /applied \d+ migration/);
    assert.match(m.output(), /database cluster region: KE\n/);
    // A labelled cluster keeps its label whatever a later deployment declares.
    const again = run('migrate', { MODE: 'production', DATABASE_URL: t.url, DEPLOYMENT_REGION: 'UG' });
    assert.equal(await again.exited, 0);
    assert.match(again.output(), /up to date/);
    assert.match(again.output(), /database cluster region: KE \(kept; DEPLOYMENT_REGION is UG/);
    assert.deepEqual((await t.db.query('SELECT region, labelled_by FROM cluster_identity')).rows, [
      { region: 'KE', labelled_by: 'migrate' },
    ]);
  });

  it('gateway → edge → core answers; edge health is SERVING; each stops on SIGTERM', async () => {
    const [corePort, authzPort, metricsPort, gatewayPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    const core = run('core', { ...env, CORE_PORT: String(corePort) });
    const edge = run('edge', {
      ...env,
      AUTHZ_PORT: String(authzPort),
      EDGE_METRICS_PORT: String(metricsPort),
    });
    const gateway = run('gateway', {
      MODE: 'production',
      GATEWAY_PORT: String(gatewayPort),
      AUTHZ_ADDRESSES: `127.0.0.1:${authzPort}`,
      CORE_ORIGINS: `http://127.0.0.1:${corePort}`,
    });
    try {
      const ready = await until(
        async () => {
          const r = await call(`http://127.0.0.1:${gatewayPort}`, 'GET', '/v1/ready');
          return r.status === 200 ? r : undefined;
        },
        60_000,
        () => `the stack (${core.output()} ${edge.output()} ${gateway.output()})`,
      );
      assert.equal(ready.status, 200);
      const edgeReady = await call(`http://127.0.0.1:${metricsPort}`, 'GET', '/ready');
      assert.equal(edgeReady.status, 200);
      const metrics = await call(`http://127.0.0.1:${metricsPort}`, 'GET', '/metrics');
      assert.match(metrics.text, /process_cpu_seconds_total/);
      // Issue 15 item 6: the edge's own metrics on its port; /v1/ready above was one of its decisions.
      assert.match(
        metrics.text,
        /^edge_decisions_total\{purpose="operational",outcome="allow",code="OK"\} [1-9]/m,
      );
      assert.match(metrics.text, /^edge_policy_info\{policy_version="[^"]+",registry_version="[^"]+"\} 1$/m);
      const Health = healthService();
      const client = new Health(
        `127.0.0.1:${authzPort}`,
        grpc.credentials.createInsecure(),
      ) as unknown as grpc.Client & {
        Check(
          r: { service: string },
          o: grpc.CallOptions,
          cb: (e: grpc.ServiceError | null, r?: { status: number }) => void,
        ): void;
      };
      const status = await new Promise<number>((resolve, reject) =>
        client.Check({ service: '' }, { deadline: Date.now() + 5000 }, (e, r) =>
          e ? reject(e) : resolve(r?.status ?? -1),
        ),
      );
      client.close();
      assert.equal(status, ServingStatus.SERVING);
      // Identity headers sent straight to core without the shared secret identify nobody.
      const direct = await call(`http://127.0.0.1:${corePort}`, 'GET', '/v1/audit', {
        headers: {
          'x-request-id': 'direct-1',
          'x-tenant-id': 'demo',
          'x-principal-id': 'x',
          'x-roles': 'admin',
          'x-purpose': 'operational',
          'x-aal': '2',
        },
      });
      assert.ok(direct.status === 401 || direct.status === 403, `direct call refused (${direct.status})`);
      assert.doesNotMatch(
        core.output() + edge.output(),
        /"(pin|otp|secret|token)":"[^[]/i,
        'no secret in logs',
      );
    } finally {
      const started = Date.now();
      for (const p of [gateway, edge, core]) p.child.kill('SIGTERM');
      const codes = await Promise.all([gateway.exited, edge.exited, core.exited]);
      assert.deepEqual(codes, [0, 0, 0], `clean exits (${core.output()} ${edge.output()})`);
      assert.ok(Date.now() - started < 10_000, 'within 10 s');
    }
  });
});

describe('npm run bootstrap', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());

  it('creates the operator tenant once and prints a short-lived admin credential once', async () => {
    const env = {
      MODE: 'production',
      DATABASE_URL: t.url,
      MASTER_KEY: key(),
      BOOTSTRAP_TENANT_ID: 'acme-ops',
      BOOTSTRAP_COUNTRY: 'KE',
      BOOTSTRAP_CURRENCY: 'KES',
    };
    const first = run('bootstrap', env);
    assert.equal(await first.exited, 0, first.output());
    const token = /Bearer (svc_\S+)/.exec(first.output())?.[1];
    assert.ok(token, 'the credential is printed');
    const { rows } = await t.db.query<{ tenant_id: string; roles: string[]; expires_at: Date }>(
      `SELECT o.tenant_id, s.roles, s.expires_at FROM platform_operator o JOIN service_tokens s ON s.tenant_id = o.tenant_id`,
    );
    assert.equal(rows[0]?.tenant_id, 'acme-ops');
    assert.deepEqual(rows[0]?.roles, ['admin']);
    assert.ok(rows[0]!.expires_at.getTime() - Date.now() <= 24 * 3600_000 + 60_000, 'expires within a day');
    const keys = await t.db.query(
      `SELECT 1 FROM signing_keys WHERE tenant_id = 'acme-ops' AND state = 'active'`,
    );
    assert.equal(keys.rowCount, 1);
    const audit = await t.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'acme-ops' AND action = 'platform.bootstrap'`,
    );
    assert.equal(audit.rowCount, 1);
    // Issue 16: the first Admin is a person, who registers a passkey from a one-time link.
    const link = /(http:\/\/localhost:8000)?\/staff#tenant=acme-ops&enrol=(enr_[A-Za-z0-9_-]+)/.exec(
      first.output(),
    );
    assert.ok(link, first.output());
    const admin = await t.db.query<{ user_name: string; roles: string[] }>(
      `SELECT u.user_name, array_agg(r.role) AS roles FROM staff_users u JOIN staff_user_roles r ON r.user_id = u.id WHERE u.tenant_id = 'acme-ops' GROUP BY u.user_name`,
    );
    assert.deepEqual(admin.rows, [{ user_name: 'admin', roles: ['admin'] }]);
    const live = await t.db.query(
      `SELECT 1 FROM staff_enrolment_links WHERE tenant_id = 'acme-ops' AND used_at IS NULL AND expires_at > now()`,
    );
    assert.equal(live.rowCount, 1);
    const again = run('bootstrap', env);
    assert.equal(await again.exited, 1);
    assert.match(again.output(), /already bootstrapped/);
    assert.doesNotMatch(again.output(), /svc_|enr_/, 'no second credential');
    const missing = run('bootstrap', { MODE: 'production', DATABASE_URL: t.url, MASTER_KEY: key() });
    assert.equal(await missing.exited, 2);
    assert.match(missing.output(), /BOOTSTRAP_COUNTRY/);
  });
});

describe('README "Running it as services"', () => {
  it('documents every variable the services read', async () => {
    const { readFile } = await import('node:fs/promises');
    const { serviceVars } = await import('../../bin/service-config.ts');
    const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
    const section = readme.slice(
      readme.indexOf('## Running it as services'),
      readme.indexOf('## Running several instances'),
    );
    assert.ok(section.length > 0);
    for (const name of Object.keys(serviceVars))
      assert.ok(section.includes(`\`${name}\``), `${name} is documented`);
  });
});
