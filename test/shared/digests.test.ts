/**
 * The SHA-256 digests the edge and core compare with what clients computed (step-up `orig`, a
 * signed request's body hash, DPoP `ath`, a client certificate's `x5t#S256`) are byte for byte
 * the digest of the UTF-8 bytes (or the DER) the SPEC names, whatever form the input arrives in:
 * string or Buffer, empty, non-ASCII, a lone surrogate (as UTF-8 writes it, U+FFFD).
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID, X509Certificate } from 'node:crypto';
import { describe, it } from 'node:test';
import { canonicalString } from '../../shared/api-key-signing.ts';
import { origOf } from '../../shared/challenge.ts';
import { verifyDpopProof } from '../../shared/dpop.ts';
import { certificateThumbprint } from '../../shared/mtls.ts';
import { dpopKey, proof } from '../helpers/dpop.ts';
import { makePki } from '../helpers/pki.ts';

/** The reference: SHA-256 of exactly these bytes. */
const sha256 = (bytes: Buffer, encoding: 'hex' | 'base64url') =>
  createHash('sha256').update(bytes).digest(encoding);
const texts = ['', 'abc', '{"amount":"1.50","note":"ü€😀"}', 'lone \uD800 surrogate', 'nul\u0000inside'];

describe('request digests', () => {
  it("a signed request's body hash is the hex SHA-256 of the body's bytes, for a string or a Buffer body", () => {
    for (const t of texts) {
      const bytes = Buffer.from(t, 'utf8');
      for (const body of [t, bytes]) {
        const line = canonicalString('post', '/v1/x?a=1', body, 'date', 'nonce').split('\n')[2];
        assert.equal(line, sha256(bytes, 'hex'), JSON.stringify(t));
      }
    }
    // Bytes that are no UTF-8 are hashed as they are, not as text.
    const raw = Buffer.from([0xff, 0xfe, 0x00, 0xc3]);
    assert.equal(canonicalString('POST', '/p', raw, 'd', 'n').split('\n')[2], sha256(raw, 'hex'));
  });

  it('the step-up orig is base64url SHA-256 of METHOD|path|body as UTF-8, for a string or a Buffer body', () => {
    for (const t of ['', 'plain ü€😀 text', 'lone \uD800']) {
      const expected = sha256(Buffer.from(`POST|/v1/transfers?x=é|${t}`, 'utf8'), 'base64url');
      assert.equal(origOf('post', '/v1/transfers?x=é', t), expected, JSON.stringify(t));
      assert.equal(origOf('post', '/v1/transfers?x=é', Buffer.from(t, 'utf8')), expected, JSON.stringify(t));
    }
  });

  it("a client certificate's x5t#S256 is base64url SHA-256 of its DER, parsed or as Envoy forwards it", async () => {
    const pki = await makePki();
    try {
      const pem = (await pki.client('/CN=digest-client')).cert;
      const der = new X509Certificate(pem).raw;
      assert.equal(certificateThumbprint(new X509Certificate(pem)), sha256(der, 'base64url'));
      assert.equal(certificateThumbprint(encodeURIComponent(pem)), sha256(der, 'base64url'));
    } finally {
      await pki.dispose();
    }
  });

  it("DPoP ath is base64url SHA-256 of the access token's bytes (RFC 9449 §4.2 example), any other refused", async () => {
    // RFC 9449 §7.1's token and its ath.
    const token = 'Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU';
    assert.equal(sha256(Buffer.from(token), 'base64url'), 'fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo');
    const key = await dpopKey();
    const url = 'https://api.example/v1/accounts';
    const check = async (presented: string, accessToken: string) =>
      verifyDpopProof({
        proof: await proof(key, 'GET', url, { accessToken: presented, jti: randomUUID() }),
        method: 'GET',
        url,
        nowMs: Date.now(),
        accessToken,
        firstUse: async () => true,
      });
    for (const t of [token, 'tøken-ü€😀']) assert.equal((await check(t, t)).jkt, key.jkt, JSON.stringify(t));
    await assert.rejects(check(token, `${token}x`), /ath does not match/);
  });
});
