/**
 * The policy input's tenant carries the settings a policy may read, never the tenant's trusted CA
 * certificates (`mtls_trusted_cas`, up to 20 PEMs): those would be serialised into every
 * evaluation and every recorded decision input. The copy is made once per cached settings object.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { malformedTenant, targetTenantOf, tenantInput } from '../../edge/authz.ts';
import type { RequestView } from '../../edge/check.ts';
import type { ResolvedRoute } from '../../edge/routes.ts';
import type { TenantState } from '../../edge/state/store.ts';
import { parseQuery } from '../../core/http/validate.ts';
import { tenantIdPattern } from '../../shared/tenant-id.ts';

const pem = `-----BEGIN CERTIFICATE-----\n${'A'.repeat(16_000)}\n-----END CERTIFICATE-----`;

function tenant(security: Record<string, unknown>): TenantState {
  return { status: 'ACTIVE', security, platform: false } as unknown as TenantState;
}

describe('the policy input of a tenant', () => {
  it('leaves out the trusted CA certificates and keeps every other setting', () => {
    const ranges = ['10.0.0.0/8'];
    const t = tenant({
      allowed_ip_ranges: ranges,
      mfa_required_for_all_users: true,
      require_mtls_for_m2m: true,
      mtls_trusted_cas: Array(20).fill(pem),
      timezone: 'Africa/Nairobi',
    });
    const input = tenantInput('t1', t) as { security: Record<string, unknown> };
    assert.deepEqual(input.security, {
      allowed_ip_ranges: ['10.0.0.0/8'],
      mfa_required_for_all_users: true,
      require_mtls_for_m2m: true,
      timezone: 'Africa/Nairobi',
    });
    assert.equal(
      input.security.allowed_ip_ranges,
      ranges,
      'the same list (the range reader remembers it by identity)',
    );
    assert.ok(JSON.stringify(tenantInput('t1', t)).length < 1000, 'no certificate text in the input');
    assert.ok('mtls_trusted_cas' in t.security, 'the cached settings themselves are untouched');
  });

  it('copies a tenant settings object once, and passes one without CAs as it is', () => {
    const t = tenant({ mtls_trusted_cas: [pem], mfa_required_for_all_users: false });
    const first = (tenantInput('t1', t) as { security: object }).security;
    assert.equal((tenantInput('t1', t) as { security: object }).security, first);
    const plain = tenant({ allowed_ip_ranges: [] });
    assert.equal((tenantInput('t2', plain) as { security: object }).security, plain.security);
  });
});

describe('the policy input of a tenant whose stored settings are not an object', () => {
  // tenants.security is any jsonb (NOT NULL only): a scalar there reached the policy as it was,
  // and the edge's other readers (`security.timezone`) read nothing from it; the copy must not
  // turn it into a TypeError on every Check of the tenant (`in` refuses a primitive).
  it('passes a scalar through as it was, without throwing', () => {
    for (const stored of ['strict', 42, true]) {
      const t = tenant({}) as unknown as { security: unknown };
      t.security = stored;
      const input = tenantInput('t1', t as unknown as TenantState) as { security: unknown };
      assert.equal(input.security, stored);
    }
  });
});

/** The tenant a request names (targetTenantOf): the query is everything after the first `?`, as core's URL parser reads it. */
describe('the tenant a request names', () => {
  const view = (pathWithQuery: string, body = ''): RequestView => ({
    method: 'POST',
    pathWithQuery,
    path: pathWithQuery.split('?')[0] as string,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: Buffer.from(body),
    sourceIp: '203.0.113.9',
    requestId: 'r',
    decisionId: 'd',
    scheme: 'https',
  });
  const resolved = (params: Record<string, string> = {}) => ({ params }) as unknown as ResolvedRoute;

  it('reads the path, the query and the body, and refuses two different names', () => {
    assert.equal(targetTenantOf(view('/v1/x'), resolved()), undefined);
    assert.equal(targetTenantOf(view('/v1/x', '{"tenant_id":"t1"}'), resolved()), 't1');
    assert.equal(targetTenantOf(view('/v1/x?tenant=t1'), resolved()), 't1');
    assert.equal(targetTenantOf(view('/v1/x?tenantId=t1&tenant=t1'), resolved({ tenantId: 't1' })), 't1');
    assert.equal(targetTenantOf(view('/v1/x?tenant=t2'), resolved({ tenantId: 't1' })), malformedTenant);
    assert.equal(targetTenantOf(view('/v1/x?tenant=t2', '{"tenantId":"t1"}'), resolved()), malformedTenant);
  });

  it('reads a query value holding a second `?` whole, as core does', () => {
    const url = new URL('http://core/v1/x?tenant=t1?b=c');
    assert.equal(url.searchParams.get('tenant'), 't1?b=c');
    // The whole value is not a tenant id: judged as a malformed one, never as `t1`.
    assert.equal(targetTenantOf(view('/v1/x?tenant=t1?b=c'), resolved()), malformedTenant);
    // Core reads `search` less its `?` through URLSearchParams (parseQuery), which drops a second one.
    assert.equal(parseQuery(new URL('http://core/v1/x??tenant=t1').search).tenant, 't1');
    assert.equal(targetTenantOf(view('/v1/x??tenant=t1'), resolved()), 't1');
  });
});

/**
 * The edge must judge the tenant core reads. Core reads the query as its URL parser does
 * (core/http/server.ts: `new URL(req.url).search`), which ends at a `#`; Node's HTTP parser hands a
 * request target with a `#` on as it came, so the edge sees the same text.
 */
describe('the tenant a query names, as core reads it', () => {
  const viewOf = (pathWithQuery: string): RequestView => ({
    method: 'GET',
    pathWithQuery,
    path: pathWithQuery.split('?')[0] as string,
    headers: {},
    body: Buffer.alloc(0),
    sourceIp: '203.0.113.9',
    requestId: 'r',
    decisionId: 'd',
    scheme: 'https',
  });
  const none = { params: {} } as unknown as ResolvedRoute;
  const coreReads = (pathWithQuery: string): string | undefined => {
    const q = parseQuery(new URL(pathWithQuery, 'http://core.invalid').search);
    const t = q.tenantId ?? q.tenant;
    // A value that is no tenant id is judged as a malformed one (refused), never as another tenant.
    return t === undefined || tenantIdPattern.test(t) ? t : malformedTenant;
  };

  it('names no tenant core does not read, after a `#` or anywhere else', () => {
    for (const p of [
      '/v1/x?a=1#tenant=t2',
      '/v1/x?#tenant=t2',
      '/v1/x?a=1#&tenant=t2',
      '/v1/x?#&tenantId=t2',
      '/v1/x?tenant=t1#tenant=t2',
      '/v1/x?tenant=t1#&tenant=t2',
      '/v1/x?tenant=t1&&a=%3Ftenant%3Dt2',
      '/v1/x?a=%23&tenant=t1',
      '/v1/x?tenant=t1?tenant=t2',
      '/v1/x??tenant=t2',
      '/v1/x?&tenant=t1&',
    ]) {
      assert.equal(targetTenantOf(viewOf(p), none), coreReads(p), p);
    }
  });
});
