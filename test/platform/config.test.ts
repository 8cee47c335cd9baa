import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../bin/config.ts';

describe('configuration', () => {
  it('has the documented defaults', () => {
    const c = loadConfig({});
    assert.deepEqual(
      { ...c },
      {
        gatewayPort: 8000,
        corePort: 8080,
        authzPort: 9191,
        dataDir: resolve('./.data'),
        databaseUrl: undefined,
        masterKey: undefined,
        policyBundle: undefined,
        issuerUrl: undefined,
        logLevel: 'info',
        webauthnRpId: 'localhost',
        webauthnOrigins: [],
        deploymentRegion: 'KE',
        decisionInputs: { sample: 1, retentionHours: 168, maxBytes: 1024 * 1024 * 1024 },
      },
    );
    assert.ok(Object.isFrozen(c));
  });

  it('accepts port 0 and DATABASE_URL', () => {
    const c = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATABASE_URL: 'postgres://u:p@h:5432/d',
      LOG_LEVEL: 'debug',
    });
    assert.equal(c.gatewayPort, 0);
    assert.equal(c.databaseUrl, 'postgres://u:p@h:5432/d');
  });

  it('takes ISSUER_URL without a trailing slash, query or fragment (issue 17 item 5)', () => {
    assert.equal(
      loadConfig({ ISSUER_URL: 'https://auth.example.com' }).issuerUrl,
      'https://auth.example.com',
    );
    for (const bad of [
      'https://auth.example.com/',
      'auth.example.com',
      'https://a.example?x=1',
      'ftp://a.example',
    ]) {
      assert.throws(
        () => loadConfig({ ISSUER_URL: bad }),
        (err: unknown) => err instanceof ConfigError && /ISSUER_URL/.test(err.problems.join()),
        bad,
      );
    }
  });

  it('takes DEPLOYMENT_REGION as an ISO 3166 alpha-2 code (issue 20 item 2)', () => {
    assert.equal(loadConfig({ DEPLOYMENT_REGION: 'UG' }).deploymentRegion, 'UG');
    for (const bad of ['ug', 'Uganda', 'U1']) {
      assert.throws(
        () => loadConfig({ DEPLOYMENT_REGION: bad }),
        (err: unknown) => err instanceof ConfigError && /DEPLOYMENT_REGION/.test(err.problems.join()),
        bad,
      );
    }
  });

  it('reads the decision-input recording settings (issue 22) and refuses a sample outside 0..1', () => {
    assert.deepEqual(
      loadConfig({
        DECISION_INPUTS_SAMPLE: '0.25',
        DECISION_INPUTS_RETENTION_HOURS: '24',
        DECISION_INPUTS_MAX_MB: '10',
      }).decisionInputs,
      { sample: 0.25, retentionHours: 24, maxBytes: 10 * 1024 * 1024 },
    );
    for (const bad of ['1.5', '-0.1', 'all', '2']) {
      assert.throws(
        () => loadConfig({ DECISION_INPUTS_SAMPLE: bad }),
        (err: unknown) => err instanceof ConfigError && /DECISION_INPUTS_SAMPLE/.test(err.problems.join()),
        bad,
      );
    }
  });

  it('lists every problem at once', () => {
    try {
      loadConfig({
        GATEWAY_PORT: 'eighty',
        CORE_PORT: '70000',
        LOG_LEVEL: 'loud',
        DATABASE_URL: 'mysql://x',
        MASTER_KEY: 'short',
      });
      assert.fail('expected ConfigError');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      const text = err.problems.join('\n');
      for (const key of ['GATEWAY_PORT', 'CORE_PORT', 'LOG_LEVEL', 'DATABASE_URL', 'MASTER_KEY'])
        assert.match(text, new RegExp(key));
    }
  });
});
