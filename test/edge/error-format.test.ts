/**
 * Issue 15 item 5: one error format per audience. What the edge and the dev gateway refuse on an
 * administration route is Problem+JSON (SPEC 7.3) with `code` kept; on every other route it is
 * `{code, message}` (SPEC 2.2). Challenges stay in WWW-Authenticate whatever the body.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createGateway, maxRequestBytes, type Gateway } from '../../edge/gateway.ts';
import type { Decide } from '../../edge/server.ts';
import { createLogger } from '../../shared/log.ts';
import { freePort } from '../../shared/net.ts';
import { envoyRequest, headerOf, startTestEdge, type TestEdge } from '../helpers/edge.ts';
import { call, serve } from '../helpers/http.ts';

const log = createLogger('silent');

/** Staff routes: no token is 401 with a challenge; everything else is refused by policy. */
const refuseAll: Decide = (view, resolved) => {
  if (resolved.route?.credential === 'public')
    return { allow: true, status: 200, set: { 'x-purpose': resolved.purpose } };
  if (!view.headers.authorization) {
    return {
      allow: false,
      status: 401,
      code: 'UNAUTHENTICATED',
      message: 'a service token is required',
      responseHeaders: { 'www-authenticate': 'Bearer realm="payments"' },
      extraBody: { reason: 'UNAUTHENTICATED' },
    };
  }
  if (view.path === '/v1/tenants') throw new Error('decider fault');
  return {
    allow: false,
    status: 403,
    code: 'POLICY_DENIED',
    message: `${resolved.action} is not allowed for this role`,
  };
};

function assertProblem(
  r: { status: number; headers: Record<string, string>; json: Record<string, unknown> },
  status: number,
  code: string,
  instance: string,
): void {
  assert.match(r.headers['content-type'] ?? '', /^application\/problem\+json/);
  assert.equal(r.status, status);
  const { type, title, detail, ...rest } = r.json;
  assert.equal(type, `urn:problem:${code.toLowerCase().replaceAll('_', '-')}`);
  assert.equal(typeof title, 'string');
  assert.ok((title as string).length > 0);
  assert.equal(typeof detail, 'string');
  assert.equal(rest.status, status);
  assert.equal(rest.instance, instance);
  assert.equal(rest.code, code);
}

function assertCoreBody(
  r: { status: number; headers: Record<string, string>; json: Record<string, unknown> },
  status: number,
  code: string,
): void {
  assert.match(r.headers['content-type'] ?? '', /^application\/json/);
  assert.equal(r.status, status);
  assert.deepEqual(
    Object.keys(r.json)
      .filter((k) => k !== 'reason')
      .sort(),
    ['code', 'message'],
  );
  assert.equal(r.json.code, code);
}

describe('edge and gateway refusals by audience', () => {
  let edge: TestEdge;
  let gw: Gateway;
  let origin: string;
  // Nothing listens there: a request the gateway forwarded would answer 502, not the refusal.
  let coreOrigin: string;

  before(async () => {
    coreOrigin = `http://127.0.0.1:${await freePort()}`;
    edge = await startTestEdge({ log, decide: refuseAll, budgetMs: 2000 });
    gw = createGateway({ log, authzAddress: edge.address, coreOrigin, checkTimeoutMs: 2000 });
    origin = (await serve(gw.server)).origin;
  });
  after(async () => {
    await gw.close();
    await edge.close();
  });

  it('the edge answers Problem+JSON on an administration route, {code, message} on a customer route', async () => {
    const admin = await edge.check(
      envoyRequest('POST', '/v1/products', { headers: { authorization: 'Bearer svc_x' }, body: '{}' }),
    );
    assert.equal(headerOf(admin, 'content-type'), 'application/problem+json');
    const problem = JSON.parse(admin.denied_response?.body ?? '') as Record<string, unknown>;
    assert.deepEqual(problem, {
      type: 'urn:problem:policy-denied',
      title: 'Forbidden',
      status: 403,
      detail: 'product.create_product is not allowed for this role',
      instance: '/v1/products',
      code: 'POLICY_DENIED',
    });
    const customer = await edge.check(
      envoyRequest('GET', '/v1/accounts?limit=5', { headers: { authorization: 'Bearer x' } }),
    );
    assert.equal(headerOf(customer, 'content-type'), 'application/json');
    assert.deepEqual(JSON.parse(customer.denied_response?.body ?? ''), {
      code: 'POLICY_DENIED',
      message: 'account.read is not allowed for this role',
    });
  });

  it('through the gateway: a missing token on an admin route is Problem+JSON with the challenge header', async () => {
    const r = await call(origin, 'GET', '/v1/countries?limit=1');
    assertProblem(r, 401, 'UNAUTHENTICATED', '/v1/countries');
    assert.equal(r.json.title, 'Unauthorized');
    assert.equal(r.json.reason, 'UNAUTHENTICATED');
    assert.equal(r.headers['www-authenticate'], 'Bearer realm="payments"');
    const customer = await call(origin, 'GET', '/v1/accounts');
    assertCoreBody(customer, 401, 'UNAUTHENTICATED');
    assert.equal(customer.headers['www-authenticate'], 'Bearer realm="payments"');
  });

  it('the edge failing closed on an admin route answers Problem+JSON 503 authz_unavailable', async () => {
    const r = await call(origin, 'GET', '/v1/tenants', { headers: { authorization: 'Bearer svc_x' } });
    assertProblem(r, 503, 'authz_unavailable', '/v1/tenants');
    assert.equal(r.json.title, 'Service Unavailable');
  });

  it("the gateway's own 413 follows the route's audience", async () => {
    const big = 'a'.repeat(maxRequestBytes + 1);
    assertProblem(
      await call(origin, 'POST', '/v1/products', {
        body: big,
        headers: { 'content-type': 'application/json' },
      }),
      413,
      'PAYLOAD_TOO_LARGE',
      '/v1/products',
    );
    assertCoreBody(
      await call(origin, 'POST', '/v1/transfers', {
        body: big,
        headers: { 'content-type': 'application/json' },
      }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
  });

  it("the gateway's own 503 when no edge answers follows the route's audience", async () => {
    const down = createGateway({
      log,
      authzAddress: `127.0.0.1:${await freePort()}`,
      coreOrigin,
      checkTimeoutMs: 500,
    });
    const s = await serve(down.server);
    try {
      assertProblem(
        await call(s.origin, 'DELETE', '/v1/webhooks/w1'),
        503,
        'authz_unavailable',
        '/v1/webhooks/w1',
      );
      assertCoreBody(await call(s.origin, 'POST', '/v1/transfers', { json: {} }), 503, 'authz_unavailable');
    } finally {
      await down.close();
    }
  });
});
