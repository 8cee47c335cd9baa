/**
 * Is a 32-byte Ed25519 public key one a device could really hold? (issue 13 item 10)
 *
 * Node's `createPublicKey` accepts any 32 bytes, and a key registered as a second factor must
 * be a key: one of the 8 small-order points (32 zero bytes is one) lets anyone forge
 * "signatures" that some verifiers accept, and a non-canonical encoding (y >= p, or x = 0 with
 * the sign bit set) names a point under a second spelling. A key made by any Ed25519 library is
 * A = a·B, a point of the prime-order subgroup, so refusing everything else never refuses one.
 *
 * The point is decoded as RFC 8032 section 5.1.3 does it and then multiplied by the group order
 * L: the identity means a prime-order point; [8]P = identity means small order. Runs in a few
 * milliseconds with bigint arithmetic, once per registration.
 */

const p = 2n ** 255n - 19n;
const L = 2n ** 252n + 27742317777372353535851937790883648493n;

const mod = (a: bigint): bigint => {
  const r = a % p;
  return r < 0n ? r + p : r;
};

function pow(base: bigint, exp: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  for (let e = exp; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % p;
    b = (b * b) % p;
  }
  return result;
}

const d = mod(-121665n * pow(121666n, p - 2n));
const sqrtMinus1 = pow(2n, (p - 1n) / 4n);

/** Extended homogeneous coordinates (RFC 8032 section 5.1.4). */
interface Point {
  X: bigint;
  Y: bigint;
  Z: bigint;
  T: bigint;
}

function add(P: Point, Q: Point): Point {
  const A = mod((P.Y - P.X) * (Q.Y - Q.X));
  const B = mod((P.Y + P.X) * (Q.Y + Q.X));
  const C = mod(2n * d * P.T * Q.T);
  const D = mod(2n * P.Z * Q.Z);
  const E = B - A;
  const F = D - C;
  const G = D + C;
  const H = B + A;
  return { X: mod(E * F), Y: mod(G * H), Z: mod(F * G), T: mod(E * H) };
}

function double(P: Point): Point {
  const A = mod(P.X * P.X);
  const B = mod(P.Y * P.Y);
  const C = mod(2n * P.Z * P.Z);
  const H = A + B;
  const E = H - mod((P.X + P.Y) * (P.X + P.Y));
  const G = A - B;
  const F = C + G;
  return { X: mod(E * F), Y: mod(G * H), Z: mod(F * G), T: mod(E * H) };
}

function times(P: Point, k: bigint): Point {
  let acc: Point = { X: 0n, Y: 1n, Z: 1n, T: 0n };
  for (let i = BigInt(k.toString(2).length - 1); i >= 0n; i--) {
    acc = double(acc);
    if ((k >> i) & 1n) acc = add(acc, P);
  }
  return acc;
}

const isIdentity = (P: Point): boolean => P.X === 0n && P.Y === P.Z;

/** RFC 8032 5.1.3, strict: refuses y >= p, a y with no x, and x = 0 with the sign bit set. */
function decode(bytes: Uint8Array): Point | 'non-canonical' | 'not-on-curve' {
  let y = 0n;
  for (let i = 31; i >= 0; i--) y = (y << 8n) | BigInt(bytes[i] ?? 0);
  const sign = y >> 255n;
  y &= (1n << 255n) - 1n;
  if (y >= p) return 'non-canonical';
  const u = mod(y * y - 1n);
  const v = mod(d * y * y + 1n);
  let x = mod(u * pow(v, 3n) * pow(u * pow(v, 7n), (p - 5n) / 8n));
  const vx2 = mod(v * x * x);
  if (vx2 === mod(-u)) x = mod(x * sqrtMinus1);
  else if (vx2 !== u) return 'not-on-curve';
  if (x === 0n && sign === 1n) return 'non-canonical';
  if ((x & 1n) !== sign) x = p - x;
  return { X: x, Y: y, Z: 1n, T: mod(x * y) };
}

export type Ed25519KeyProblemCode =
  | 'non_canonical'
  | 'not_on_curve'
  | 'small_order'
  | 'mixed_order'
  | 'wrong_length';

const problemText: Record<Ed25519KeyProblemCode, string> = {
  wrong_length: 'is not 32 bytes',
  non_canonical: 'is a non-canonical point encoding',
  not_on_curve: 'is not a point of the Ed25519 curve',
  small_order: 'is a small-order point',
  mixed_order: 'is not in the prime-order subgroup',
};

/** Why `raw` is not a usable Ed25519 public key (a code and words for a message), or undefined. */
export function ed25519KeyProblem(
  raw: Uint8Array,
): { code: Ed25519KeyProblemCode; text: string } | undefined {
  const code = problemOf(raw);
  return code ? { code, text: problemText[code] } : undefined;
}

function problemOf(raw: Uint8Array): Ed25519KeyProblemCode | undefined {
  if (raw.length !== 32) return 'wrong_length';
  const P = decode(raw);
  if (P === 'non-canonical') return 'non_canonical';
  if (P === 'not-on-curve') return 'not_on_curve';
  if (isIdentity(double(double(double(P))))) return 'small_order';
  if (!isIdentity(times(P, L))) return 'mixed_order';
  return undefined;
}
