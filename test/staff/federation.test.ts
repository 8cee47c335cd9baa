/**
 * Federation pieces without a stack (issue 14 item 2): the provider's discovery goes through the
 * webhook SSRF guard, so a provider at a private, loopback or metadata address is refused unless
 * the operator allowed it; plain http only where private targets are allowed; AAL from amr/acr.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TargetGuard, TargetRefused } from '../../core/admin/webhooks/target.ts';
import { aalOf } from '../../core/staff/federation.ts';
import { discover } from '../../core/staff/idp.ts';
import { startTestIdp, type TestIdp } from './idp.ts';

describe('federation: provider address and assurance level', () => {
  let idp: TestIdp;
  before(async () => {
    idp = await startTestIdp('http://127.0.0.1:9/auth/callback');
  });
  after(() => idp?.close());

  const client = (issuer: string) => ({ issuer, clientId: 'c', clientSecret: 's' });

  it('refuses a provider at a loopback or private address under the production guard', async () => {
    const production = new TargetGuard();
    for (const issuer of [
      idp.issuer,
      'https://10.1.2.3/realms/x',
      'https://[::1]/',
      'https://localhost/',
      'https://169.254.169.254/',
    ]) {
      await assert.rejects(discover(production, client(issuer)), TargetRefused, issuer);
    }
  });

  it('refuses a plain-http provider where private targets are not allowed, even when the operator listed its network', async () => {
    const listed = new TargetGuard({ allowedCidrs: ['127.0.0.0/8'] });
    await assert.rejects(
      discover(listed, client(idp.issuer)),
      (err: unknown) => err instanceof TargetRefused && err.reason === 'scheme',
    );
  });

  it('reaches a provider on loopback only where private targets are allowed (tests, development)', async () => {
    const config = await discover(new TargetGuard({ allowPrivateTargets: true }), {
      issuer: idp.issuer,
      clientId: idp.clientId,
      clientSecret: idp.clientSecret,
    });
    assert.equal(config.serverMetadata().issuer, idp.issuer);
  });

  it('AAL 2 only when the provider asserts a second factor', () => {
    assert.equal(aalOf(['pwd'], undefined), 1);
    assert.equal(aalOf(undefined, undefined), 1);
    assert.equal(aalOf(['pwd', 'otp'], undefined), 2);
    assert.equal(aalOf(['hwk'], undefined), 2);
    assert.equal(aalOf(['mfa'], undefined), 2);
    assert.equal(aalOf(['pwd', 'kba'], undefined), 1, 'two knowledge methods are one factor');
    assert.equal(aalOf(['pwd'], 'http://schemas.openid.net/pape/policies/2007/06/multi-factor'), 2);
    assert.equal(aalOf([], 'urn:mace:incommon:iap:aal2'), 2);
    assert.equal(aalOf(['pwd'], '1'), 1);
    assert.equal(aalOf('otp', 42), 1, 'malformed claims count as nothing');
  });
});
