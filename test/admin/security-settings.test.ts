/**
 * Tenant security settings (issue 20 item 1; core/admin/onboarding/security.ts): the effective
 * document read from what is stored (defaults field by field), and the rules the schema cannot
 * express. The HTTP side (If-Match, 428/412/422, the edge applying a change) is in
 * test/e2e/onboarding.test.ts.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { describe, it } from 'node:test';
import { securityProblems, settingsOf, storedCaFingerprints } from '../../core/admin/onboarding/security.ts';
import type { Caller } from '../../core/admin/http.ts';
import { issuedByTrustedCa, machineMtlsRule, tenantMtlsRefusal } from '../../shared/mtls.ts';
import { makeForge } from '../helpers/pki-forge.ts';

const caller = (ip: string): Caller => ({
  tenantId: 't',
  principalId: 'staff:x',
  roles: ['admin'],
  ip,
  aal: 2,
  sessionId: undefined,
});

describe('tenant security settings', () => {
  it('shows every field: stored values that hold, defaults for absent or malformed ones', () => {
    const s = settingsOf({
      session_timeout_minutes: 45,
      device_cooloff_hours: -1,
      address_throttle: { failures: 50 },
      require_dpop: 'yes',
      other: 1,
    });
    assert.equal(s.session_timeout_minutes, 45);
    assert.equal(s.device_cooloff_hours, 24, 'out of range: the default');
    assert.equal(s.require_dpop, false, 'not a boolean: the default');
    assert.deepEqual(s.address_throttle, {
      failures: 50,
      window_minutes: 15,
      delay_seconds: 60,
      max_delay_minutes: 60,
    });
    assert.equal(s.timezone, 'UTC');
    assert.deepEqual(settingsOf(null), settingsOf({}));
  });

  it('refuses what the schema lets through: bad CIDRs, a nonce without DPoP, an unknown zone, a throttle whose longest delay is shorter than its first, a non-certificate CA', () => {
    const ok = settingsOf({});
    assert.deepEqual(securityProblems(ok, caller('127.0.0.1'), true), []);
    const bad = {
      ...ok,
      allowed_ip_ranges: ['10.0.0.0/33', '300.1.1.1/8'],
      require_dpop_nonce: true,
      timezone: 'Mars/Olympus',
      address_throttle: { ...ok.address_throttle, delay_seconds: 3600, max_delay_minutes: 1 },
      mtls_trusted_cas: ['-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----'],
    };
    const problems = securityProblems(bad, caller('127.0.0.1'), true).join('\n');
    for (const p of [
      'allowed_ip_ranges[0]',
      'allowed_ip_ranges[1]',
      'require_dpop_nonce',
      'timezone',
      'max_delay_minutes',
      'mtls_trusted_cas[0]',
    ])
      assert.match(problems, new RegExp(p.replace(/[[\]]/g, '\\$&')));
  });

  it('refuses a trusted CA outside its validity, naming it, and takes it within', () => {
    const forge = makeForge();
    try {
      const ca = forge.ca({ subject: '/CN=Operator CA', days: 2 }).cert;
      const listing = { ...settingsOf({}), mtls_trusted_cas: [ca] };
      const day = 86_400_000;
      const at = (ms: number) => securityProblems(listing, caller('127.0.0.1'), true, ms).join('\n');
      assert.equal(at(Date.now()), '');
      assert.match(at(Date.now() + 3 * day), /mtls_trusted_cas\[0\]: not valid now \(valid from .* to .*\)/);
      assert.match(at(Date.now() - day), /mtls_trusted_cas\[0\]: not valid now/);
    } finally {
      forge.dispose();
    }
  });

  it('keeps a CA the tenant already trusts once it expires, and still refuses a new one outside its validity', () => {
    const forge = makeForge();
    try {
      const stored = forge.ca({ subject: '/CN=Stored CA', days: 2 }).cert;
      const fresh = forge.ca({ subject: '/CN=New CA', days: 2 }).cert;
      const later = Date.now() + 3 * 86_400_000;
      const kept = storedCaFingerprints([stored, 'not a certificate']);
      assert.equal(kept.size, 1, 'a stored value that is no certificate is not kept');
      const problems = (cas: string[]) =>
        securityProblems(
          { ...settingsOf({}), mtls_trusted_cas: cas },
          caller('127.0.0.1'),
          true,
          later,
          kept,
        );
      assert.deepEqual(problems([stored]), [], 'the stored CA, expired, put back unchanged');
      const both = problems([stored, fresh]).join('\n');
      assert.doesNotMatch(both, /mtls_trusted_cas\[0\]/);
      assert.match(both, /mtls_trusted_cas\[1\]: not valid now/, 'a newly listed expired CA is refused');
      assert.match(
        securityProblems(
          { ...settingsOf({}), mtls_trusted_cas: [stored] },
          caller('127.0.0.1'),
          true,
          later,
        ).join(),
        /mtls_trusted_cas\[0\]: not valid now/,
        'not stored: refused',
      );
    } finally {
      forge.dispose();
    }
  });

  it('a kept CA, expired, vouches for no certificate at use: listed and moved, alone or twice', () => {
    const forge = makeForge();
    try {
      const ca = forge.ca({ subject: '/CN=Stored CA', days: 2 });
      const other = forge.ca({ subject: '/CN=Other CA', days: 30 }).cert;
      // Its client certificate outlives it: only the CA's own validity can refuse it.
      const leaf = forge.client(ca, { subject: '/CN=payouts', days: 5 }).cert;
      const later = Date.now() + 3 * 86_400_000;
      const kept = storedCaFingerprints([other, ca.cert]);
      for (const cas of [
        [ca.cert, other],
        [other, ca.cert, ca.cert],
      ]) {
        const listing = { ...settingsOf({}), require_mtls_for_m2m: true, mtls_trusted_cas: cas };
        assert.deepEqual(securityProblems(listing, caller('127.0.0.1'), true, later, kept), []);
        // The one rule the token endpoint (client-auth.ts, routes.ts) and the edge apply.
        const rule = machineMtlsRule(JSON.parse(JSON.stringify(listing)));
        assert.equal(tenantMtlsRefusal(rule, leaf, Date.now()), undefined, 'in date, it vouches');
        assert.match(tenantMtlsRefusal(rule, leaf, later) ?? '', /not issued by a CA it trusts/);
        assert.equal(issuedByTrustedCa(rule.trustedCas ?? [], new X509Certificate(leaf), later), false);
      }
    } finally {
      forge.dispose();
    }
  });

  it('takes one PEM certificate an entry: nothing hides behind a kept or valid CA that the check, the audit and the rule would not read', () => {
    const forge = makeForge();
    try {
      const storedCa = forge.ca({ subject: '/CN=Stored CA', days: 2 });
      const stored = storedCa.cert;
      const valid = forge.ca({ subject: '/CN=Valid CA', days: 30 }).cert;
      const leaf = forge.client(storedCa, { subject: '/CN=Not a CA', days: 30 });
      const stale = forge.ca({ subject: '/CN=Also expired', days: 2 }).cert;
      const later = Date.now() + 3 * 86_400_000;
      const kept = storedCaFingerprints([stored]);
      const problems = (cas: string[], nowMs = later) =>
        securityProblems(
          { ...settingsOf({}), mtls_trusted_cas: cas },
          caller('127.0.0.1'),
          true,
          nowMs,
          kept,
        ).join('\n');
      // X509Certificate reads the first certificate of a text and skips other PEM blocks before it.
      for (const [what, pem, nowMs] of [
        ['a stored CA, expired, with a leaf after it', stored + leaf.cert, later],
        ['a stored CA, expired, with an expired CA after it', `${stored}\n${stale}`, later],
        ['a valid CA with a leaf after it', valid + leaf.cert, Date.now()],
        ['a private key before a valid CA', leaf.key + valid, Date.now()],
        [
          'a label other than CERTIFICATE',
          valid.replaceAll(' CERTIFICATE', ' TRUSTED CERTIFICATE'),
          Date.now(),
        ],
        ['text before the block', `issuer: Valid CA\n${valid}`, Date.now()],
      ] as const) {
        const p = problems([valid, pem], nowMs);
        assert.match(p, /mtls_trusted_cas\[1\]: not one PEM certificate/, what);
        assert.doesNotMatch(p, /mtls_trusted_cas\[0\]/, what);
        assert.ok(!p.includes('MII'), `${what}: no PEM text echoed`);
      }
      // The same certificate written as tools write it is still that one certificate.
      assert.equal(problems([stored.replaceAll('\n', '\r\n'), `\n\n${stored}\n\n`]), '');
      assert.equal(problems([valid.trimEnd()], Date.now()), '');
    } finally {
      forge.dispose();
    }
  });

  it("refuses ranges that shut the Admin out of their own tenant, not a platform admin setting another tenant's", () => {
    const fenced = { ...settingsOf({}), allowed_ip_ranges: ['10.0.0.0/8', '2001:db8::/32'] };
    assert.match(securityProblems(fenced, caller('192.0.2.7'), true).join(), /your own address/);
    assert.deepEqual(securityProblems(fenced, caller('10.1.2.3'), true), []);
    // An IPv4 client on a dual-stack socket is an IPv6 address to the policy (shared/ip-ranges.ts):
    // 10.0.0.0/8 would shut it out, its IPv4-mapped range would not.
    assert.match(securityProblems(fenced, caller('::ffff:10.1.2.3'), true).join(), /your own address/);
    const mapped = { ...fenced, allowed_ip_ranges: ['::ffff:10.0.0.0/104'] };
    assert.deepEqual(securityProblems(mapped, caller('::ffff:10.1.2.3'), true), []);
    assert.deepEqual(securityProblems(fenced, caller('2001:db8::1'), true), []);
    assert.deepEqual(securityProblems(fenced, caller('192.0.2.7'), false), []);
  });
});
