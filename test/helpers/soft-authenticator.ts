/**
 * A software WebAuthn authenticator for tests outside the browser: P-256 (ES256) keys from
 * node:crypto, "none" attestation, a signature counter per credential, and knobs to produce
 * the bad inputs of issue 16 (another origin or RP ID, no user verification, a counter that
 * does not increase). Responses are the JSON browsers send (RegistrationResponseJSON,
 * AuthenticationResponseJSON). Minimal CBOR encoding of what WebAuthn needs, nothing more.
 */
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';

type Cbor = number | string | Buffer | Map<number | string, Cbor>;

function head(major: number, n: number): Buffer {
  if (n < 24) return Buffer.from([(major << 5) | n]);
  if (n < 0x100) return Buffer.from([(major << 5) | 24, n]);
  if (n < 0x10000) return Buffer.from([(major << 5) | 25, n >> 8, n & 0xff]);
  const b = Buffer.alloc(5);
  b[0] = (major << 5) | 26;
  b.writeUInt32BE(n, 1);
  return b;
}

export function cbor(v: Cbor): Buffer {
  if (typeof v === 'number') return v >= 0 ? head(0, v) : head(1, -1 - v);
  if (typeof v === 'string') return Buffer.concat([head(3, Buffer.byteLength(v)), Buffer.from(v, 'utf8')]);
  if (Buffer.isBuffer(v)) return Buffer.concat([head(2, v.length), v]);
  const parts = [head(5, v.size)];
  for (const [k, x] of v) parts.push(cbor(k), cbor(x));
  return Buffer.concat(parts);
}

const sha256 = (b: Buffer | string): Buffer => createHash('sha256').update(b).digest();
const b64u = (b: Buffer): string => b.toString('base64url');

interface Credential {
  id: Buffer;
  key: KeyObject;
  publicCose: Buffer;
  counter: number;
  userHandle: string;
  rpId: string;
}

export interface Ceremony {
  /** The page's origin as the browser would report it. */
  origin?: string;
  /** The RP ID hashed into authenticator data (a phishing site's would differ). */
  rpId?: string;
  /** User verification (PIN, biometric) performed; default true. */
  uv?: boolean;
}

export interface RegistrationOptionsLike {
  challenge: string;
  rp: { id?: string };
  user: { id: string };
}
export interface AuthenticationOptionsLike {
  challenge: string;
  rpId?: string;
}

export class SoftAuthenticator {
  readonly credentials: Credential[] = [];
  constructor(
    readonly origin: string,
    readonly rpId = 'localhost',
  ) {}

  private authData(rpId: string, uv: boolean, counter: number, attested?: Buffer): Buffer {
    const flags = 0x01 | (uv ? 0x04 : 0) | (attested ? 0x40 : 0);
    const c = Buffer.alloc(4);
    c.writeUInt32BE(counter);
    return Buffer.concat([sha256(rpId), Buffer.from([flags]), c, ...(attested ? [attested] : [])]);
  }

  private clientData(type: string, challenge: string, origin: string): Buffer {
    return Buffer.from(JSON.stringify({ type, challenge, origin, crossOrigin: false }), 'utf8');
  }

  /** navigator.credentials.create: a new discoverable P-256 credential. */
  register(o: RegistrationOptionsLike, c: Ceremony = {}) {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = publicKey.export({ format: 'jwk' });
    const publicCose = cbor(
      new Map<number, Cbor>([
        [1, 2],
        [3, -7],
        [-1, 1],
        [-2, Buffer.from(jwk.x ?? '', 'base64url')],
        [-3, Buffer.from(jwk.y ?? '', 'base64url')],
      ]),
    );
    const id = randomBytes(16);
    const rpId = c.rpId ?? o.rp.id ?? this.rpId;
    const cred: Credential = { id, key: privateKey, publicCose, counter: 0, userHandle: o.user.id, rpId };
    this.credentials.push(cred);
    const idLen = Buffer.alloc(2);
    idLen.writeUInt16BE(id.length);
    const attested = Buffer.concat([Buffer.alloc(16), idLen, id, publicCose]);
    const authData = this.authData(rpId, c.uv ?? true, 0, attested);
    const attestationObject = cbor(
      new Map<string, Cbor>([
        ['fmt', 'none'],
        ['attStmt', new Map()],
        ['authData', authData],
      ]),
    );
    return {
      id: b64u(id),
      rawId: b64u(id),
      type: 'public-key' as const,
      response: {
        clientDataJSON: b64u(this.clientData('webauthn.create', o.challenge, c.origin ?? this.origin)),
        attestationObject: b64u(attestationObject),
        transports: ['internal'],
      },
      clientExtensionResults: {},
    };
  }

  /**
   * navigator.credentials.get with a credential (the last registered unless `credential` names
   * another); `counter` forces the signature counter (a replayed or cloned authenticator).
   */
  assert(o: AuthenticationOptionsLike, c: Ceremony & { credential?: Credential; counter?: number } = {}) {
    const cred = c.credential ?? this.credentials.at(-1);
    if (!cred) throw new Error('no credential registered');
    cred.counter = c.counter ?? cred.counter + 1;
    const authData = this.authData(c.rpId ?? o.rpId ?? cred.rpId, c.uv ?? true, cred.counter);
    const clientDataJSON = this.clientData('webauthn.get', o.challenge, c.origin ?? this.origin);
    const signature = sign('sha256', Buffer.concat([authData, sha256(clientDataJSON)]), cred.key);
    return {
      id: b64u(cred.id),
      rawId: b64u(cred.id),
      type: 'public-key' as const,
      response: {
        clientDataJSON: b64u(clientDataJSON),
        authenticatorData: b64u(authData),
        signature: b64u(signature),
        userHandle: cred.userHandle,
      },
      clientExtensionResults: {},
    };
  }
}
