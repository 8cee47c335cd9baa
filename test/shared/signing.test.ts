/**
 * Detached document signatures (shared/signing.ts: the purpose registry's, a bundle manifest's)
 * are read in their one spelling (shared/jws.ts isCanonicalBase64url): padding, the base64
 * alphabet and spare bits decode to the same bytes, and are refused as a signature that does not verify.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { signDocument, verifyDocument } from '../../shared/signing.ts';
import { detachedRespellings } from '../helpers/respell.ts';

const { publicKey, privateKey } = generateKeyPairSync('ed25519');

/** A signed document whose signature has a `-` or `_` (so each second spelling can be made). */
function signedWithUrlCharacters(): { version: string; signature: string } {
  for (let i = 0; ; i++) {
    const doc = signDocument(
      { version: `2026-01-01T00:00:${String(i % 60).padStart(2, '0')}Z`, n: i },
      privateKey,
    );
    if (/[-_]/.test(doc.signature)) return doc;
  }
}

describe('detached document signatures in their one spelling', () => {
  it('verifies the signature as signed and refuses each second spelling of the same bytes', () => {
    const doc = signedWithUrlCharacters();
    assert.equal(verifyDocument(doc, [publicKey]), true);
    const spellings = detachedRespellings(doc.signature);
    assert.equal(spellings.length, 3);
    for (const [name, other] of spellings) {
      assert.notEqual(other, doc.signature, name);
      assert.deepEqual(
        Buffer.from(other, 'base64url'),
        Buffer.from(doc.signature, 'base64url'),
        `${name}: the same bytes`,
      );
      assert.equal(verifyDocument({ ...doc, signature: other }, [publicKey]), false, name);
    }
  });
});
