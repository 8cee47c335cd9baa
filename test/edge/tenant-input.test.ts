/**
 * The policy input's tenant carries the settings a policy may read, never the tenant's trusted CA
 * certificates (`mtls_trusted_cas`, up to 20 PEMs): those would be serialised into every
 * evaluation and every recorded decision input. The copy is made once per cached settings object.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { tenantInput } from '../../edge/authz.ts';
import type { TenantState } from '../../edge/state/store.ts';

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
