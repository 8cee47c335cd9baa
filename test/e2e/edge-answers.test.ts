/**
 * Issue 15 items 5 and 6 end to end, the stack as `npm start` runs it (bin/stack.ts): refusals on
 * administration routes are Problem+JSON whether the edge or core refuses, customer routes get
 * `{code, message}`; and core's /v1/metrics, read through the gateway, includes the edge's metrics.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';

const problemKeys = ['code', 'detail', 'instance', 'status', 'title', 'type'];

function assertProblem(r: Res, status: number, code: string, instance: string): void {
  assert.equal(r.status, status, r.text);
  assert.match(r.headers['content-type'] ?? '', /^application\/problem\+json/);
  assert.deepEqual(
    problemKeys.filter((k) => !(k in r.json)),
    [],
    r.text,
  );
  assert.equal(r.json.status, status);
  assert.equal(r.json.code, code);
  assert.equal(r.json.instance, instance);
  assert.equal(r.json.type, `urn:problem:${code.toLowerCase().replaceAll('_', '-')}`);
}

describe('edge answers through the gateway under the stack', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let readOnly = '';
  const staff = (token: string, extra: Record<string, string> = {}) => ({
    authorization: `Bearer ${token}`,
    'x-request-id': randomUUID(),
    ...extra,
  });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-edge-answers-'));
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
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: { readOnly: { token: string } };
    };
    readOnly = demo.serviceTokens.readOnly.token;
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('an admin route refused at the edge answers Problem+JSON, as core does', async () => {
    // ReadOnly may not create a product: the edge's policy refuses it.
    const refused = await call(gw, 'POST', '/v1/products', {
      json: { code: 'RO_TRY', category: 'X' },
      headers: staff(readOnly, { 'idempotency-key': 'e2e-answers-ro-1' }),
    });
    assertProblem(refused, 403, 'POLICY_DENIED', '/v1/products');
    // No token at all: 401 Problem+JSON, the challenge still in WWW-Authenticate.
    const missing = await call(gw, 'GET', '/v1/countries', { headers: { 'x-request-id': randomUUID() } });
    assertProblem(missing, 401, 'UNAUTHENTICATED', '/v1/countries');
    assert.match(missing.headers['www-authenticate'] ?? '', /^Bearer realm=/);
    // The same audience refused by core: the same shape.
    assertProblem(
      await call(gw, 'GET', '/v1/countries/ZZ', { headers: staff(readOnly) }),
      404,
      'COUNTRY_NOT_FOUND',
      '/v1/countries/ZZ',
    );
  });

  it('a customer route refused at the edge answers {code, message}', async () => {
    const r = await call(gw, 'GET', '/v1/accounts', { headers: { authorization: 'Bearer not.a.jwt' } });
    assert.equal(r.status, 401, r.text);
    assert.match(r.headers['content-type'] ?? '', /^application\/json/);
    assert.equal(r.json.code, 'invalid_token');
    assert.equal(typeof r.json.message, 'string');
    assert.equal(r.json.type, undefined);
    assert.match(r.headers['www-authenticate'] ?? '', /error="invalid_token"/);
  });

  it("/v1/metrics includes the edge's decisions, latency, state, audit queue and policy version", async () => {
    const m = await call(gw, 'GET', '/v1/metrics');
    assert.equal(m.status, 200);
    for (const name of [
      'edge_decision_duration_seconds_bucket',
      'edge_state_age_seconds',
      'edge_audit_queue_depth',
      'edge_audit_unrecorded',
      'edge_fail_closed_total',
      'edge_decision_budget_exceeded_total',
    ]) {
      assert.ok(m.text.includes(name), name);
    }
    // The requests above went through this edge, this one included.
    assert.match(m.text, /^edge_decisions_total\{purpose="operational",outcome="allow",code="OK"\} [1-9]/m);
    assert.match(
      m.text,
      /^edge_decisions_total\{purpose="customer\.account\.view",outcome="deny",code="invalid_token"\} 1$/m,
    );
    assert.match(m.text, /^edge_policy_info\{policy_version="[^"]+",registry_version="[^"]+"\} 1$/m);
    // Core's own metrics are still there.
    assert.match(m.text, /http_request_duration_seconds_bucket/);
  });
});
