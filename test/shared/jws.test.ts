/**
 * One spelling per compact JWS (shared/jws.ts): a token whose segments are padded, carry a
 * character outside base64url, or set bits past their last byte is refused by verifyJwt, though
 * its bytes decode to the very token jose would otherwise verify.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { SignJWT } from 'jose';
import { isCanonicalBase64url, isCompactJws, verifyJwt } from '../../shared/jws.ts';
import { paddedSignature, respellings, spareBitsSignature } from '../helpers/respell.ts';

const { publicKey, privateKey } = generateKeyPairSync('ed25519');
const signed = () =>
  new SignJWT({ sub: 's1' }).setProtectedHeader({ alg: 'EdDSA' }).setExpirationTime('5m').sign(privateKey);
const bytesOf = (token: string) => token.split('.').map((s) => Buffer.from(s, 'base64url'));

describe('compact JWS in its one spelling', () => {
  it('reads canonical base64url only', () => {
    for (let n = 0; n < 40; n++) {
      const text = Buffer.alloc(n, 0xa7).toString('base64url');
      assert.equal(isCanonicalBase64url(text), true, `${n} bytes`);
      if (n % 3 !== 0) assert.equal(isCanonicalBase64url(`${text}${'='.repeat(3 - (n % 3))}`), false);
    }
    for (const bad of ['A', 'AAAAA', 'AB', 'ABC', 'ab+c', 'ab/c', 'ab c', 'ab\nc', 'abc=', 'ab==', 'é']) {
      assert.equal(isCanonicalBase64url(bad), false, JSON.stringify(bad));
    }
    // AA and AAA are canonical (no spare bit set); AB and ABC spell the same bytes otherwise.
    assert.deepEqual(Buffer.from('AB', 'base64url'), Buffer.from('AA', 'base64url'));
    assert.equal(isCanonicalBase64url('AA'), true);
    assert.equal(isCanonicalBase64url('AAA'), true);
  });

  it('a token is three such segments', async () => {
    const token = await signed();
    assert.equal(isCompactJws(token), true);
    const [h, p, s] = token.split('.');
    for (const bad of [`${h}.${p}`, `${token}.`, `${h}.${p}.${s}.${s}`, `${h}=.${p}.${s}`, ` ${token}`, '']) {
      assert.equal(isCompactJws(bad), false, bad);
    }
  });

  it('verifies the token and refuses each second spelling of it, whose bytes are the same', async () => {
    const token = await signed();
    assert.equal((await verifyJwt(token, publicKey, {})).payload.sub, 's1');
    for (const [name, other] of [
      ...respellings(token),
      ['a space inside the signature', `${token.slice(0, -4)} ${token.slice(-4)}`] as [string, string],
    ]) {
      assert.notEqual(other, token);
      assert.deepEqual(Buffer.concat(bytesOf(other)), Buffer.concat(bytesOf(token)), `${name}: same bytes`);
      await assert.rejects(verifyJwt(other, publicKey, {}), { code: 'ERR_JWS_INVALID' }, name);
    }
    assert.equal(isCompactJws(paddedSignature(token)), false);
    assert.equal(isCompactJws(spareBitsSignature(token)), false);
  });
});
