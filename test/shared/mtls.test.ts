/**
 * shared/mtls.ts reading a tenant's `mtls_trusted_cas`: core reads the tenant's settings afresh
 * on every client-token call and token request (a new object each time, so the rule's WeakMap
 * never holds it), and up to 20 PEM certificates of up to 16 KiB each were parsed again each
 * time. A PEM text reads the same every time: it is read once, whatever object carries it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { certificatesOf, machineMtlsRule } from '../../shared/mtls.ts';
import { makePki, type Pki } from '../helpers/pki.ts';

describe('mtls_trusted_cas read once per PEM text', () => {
  let pki: Pki;
  before(async () => {
    pki = await makePki();
  });
  after(async () => {
    await pki.dispose();
  });

  /** The settings as core's query hands them over: a fresh object with fresh strings. */
  const fresh = (security: unknown): Record<string, unknown> => JSON.parse(JSON.stringify(security));

  it('a fresh copy of the same settings gives the certificates already read', () => {
    const security = { require_mtls_for_m2m: true, mtls_trusted_cas: [pki.ca.cert, 'not a certificate'] };
    const first = machineMtlsRule(fresh(security)).trustedCas;
    const second = machineMtlsRule(fresh(security)).trustedCas;
    assert.equal(first?.length, 1, 'the unreadable entry trusts nothing');
    assert.equal(second?.[0], first?.[0], 'the same certificate object, not a second parse');
    assert.equal(certificatesOf([`${pki.ca.cert}`])[0], first?.[0]);
  });

  it('another text is another certificate; an unreadable one stays unreadable', async () => {
    const other = await pki.client('/CN=other');
    const [ca] = certificatesOf([pki.ca.cert]);
    const [leaf] = certificatesOf([other.cert]);
    assert.ok(ca && leaf);
    assert.notEqual(ca, leaf);
    assert.equal(leaf.subject, 'CN=other');
    assert.deepEqual(certificatesOf(['not a certificate', 'not a certificate']), []);
  });
});
