import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { ed25519KeyProblem } from '../../shared/ed25519-key.ts';

const hex = (h: string) => Buffer.from(h, 'hex');
const realKey = (): Buffer =>
  Buffer.from(generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x ?? '', 'base64url');
const p = 2n ** 255n - 19n;
const encode = (y: bigint, sign: 0 | 1): Buffer => {
  const b = Buffer.alloc(32);
  for (let i = 0, v = y; i < 32; i++, v >>= 8n) b[i] = Number(v & 0xffn);
  if (sign) b[31] = (b[31] ?? 0) | 0x80;
  return b;
};

/** The 8 points of small order, each in its one canonical encoding ("Taming the many EdDSAs", table 6). */
const smallOrderKeys = [
  '0100000000000000000000000000000000000000000000000000000000000000', // identity (order 1)
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // (0, -1), order 2
  '0000000000000000000000000000000000000000000000000000000000000000', // order 4 (the 32 zero bytes)
  '0000000000000000000000000000000000000000000000000000000000000080', // order 4
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', // order 8
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa', // order 8
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', // order 8
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85', // order 8
];

describe('Ed25519 public key checks', () => {
  it('refuses the 8 small-order points', () => {
    for (const k of smallOrderKeys) assert.equal(ed25519KeyProblem(hex(k))?.code, 'small_order', k);
  });

  it('refuses non-canonical encodings: y >= p (incl. small-order points spelled as y + p) and x = 0 with the sign bit set', () => {
    const nonCanonical = [
      encode(1n, 1), // identity with the sign bit
      encode(p - 1n, 1), // (0, -1) with the sign bit
      encode(p, 0),
      encode(p, 1), // y = p ≡ 0: the order-4 points again
      encode(p + 1n, 0),
      encode(p + 1n, 1), // y = p + 1 ≡ 1: the identity again
      encode(2n ** 255n - 1n, 0), // the largest y that fits
    ];
    for (const k of nonCanonical)
      assert.equal(ed25519KeyProblem(k)?.code, 'non_canonical', k.toString('hex'));
  });

  it('refuses a y with no point on the curve, and a point outside the prime-order subgroup', () => {
    assert.equal(ed25519KeyProblem(encode(2n, 0))?.code, 'not_on_curve');
    // A real key plus the order-2 point (0, -1) is (-x, -y): on the curve, of order 2L.
    const real = realKey();
    const y = BigInt(`0x${Buffer.from(real).reverse().toString('hex')}`) & ((1n << 255n) - 1n);
    const sign = (real[31] ?? 0) >> 7;
    assert.equal(ed25519KeyProblem(encode(p - y, sign ? 0 : 1))?.code, 'mixed_order');
    assert.equal(ed25519KeyProblem(Buffer.alloc(31))?.code, 'wrong_length');
  });

  it('accepts real keys', () => {
    for (let i = 0; i < 50; i++) {
      const k = realKey();
      assert.equal(ed25519KeyProblem(k), undefined, k.toString('hex'));
    }
  });
});
