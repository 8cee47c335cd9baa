/**
 * A DPoP client for tests (RFC 9449): proofs signed with the holder's key, and a `call` that
 * adds one to every request, sends bound tokens as `Authorization: DPoP`, and answers a
 * `use_dpop_nonce` refusal once with the nonce the server sent (as standard clients do).
 */
import { createHash, generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { SignJWT, calculateJwkThumbprint, type JWK } from 'jose';
import { call, type Res } from './http.ts';

export interface DpopKey {
  privateKey: KeyObject;
  jwk: JWK;
  alg: 'ES256' | 'EdDSA';
  jkt: string;
}

export async function dpopKey(alg: 'ES256' | 'EdDSA' = 'ES256'): Promise<DpopKey> {
  const { privateKey, publicKey } =
    alg === 'ES256' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('ed25519');
  const jwk = publicKey.export({ format: 'jwk' }) as JWK;
  return { privateKey, jwk, alg, jkt: await calculateJwkThumbprint(jwk) };
}

export interface ProofOptions {
  accessToken?: string;
  nonce?: string;
  jti?: string;
  iatS?: number;
  htm?: string;
  htu?: string;
  typ?: string;
}

export async function proof(
  key: DpopKey,
  method: string,
  url: string,
  o: ProofOptions = {},
): Promise<string> {
  const u = new URL(url);
  return new SignJWT({
    htm: o.htm ?? method,
    htu: o.htu ?? `${u.origin}${u.pathname}`,
    jti: o.jti ?? randomUUID(),
    ...(o.accessToken ? { ath: createHash('sha256').update(o.accessToken).digest('base64url') } : {}),
    ...(o.nonce ? { nonce: o.nonce } : {}),
  })
    .setProtectedHeader({ alg: key.alg, typ: o.typ ?? 'dpop+jwt', jwk: key.jwk })
    .setIssuedAt(o.iatS ?? Math.floor(Date.now() / 1000))
    .sign(key.privateKey);
}

/** `call` with a proof by `key` on every request; `Authorization: Bearer t` goes as `DPoP t`. */
export function dpopCall(key: DpopKey): typeof call {
  let nonce: string | undefined;
  const once = async (
    origin: string,
    method: string,
    path: string,
    opts: Parameters<typeof call>[3] = {},
  ): Promise<Res> => {
    const headers = { ...opts.headers };
    const auth = /^(?:Bearer|DPoP)\s+(\S+)$/i.exec(headers.authorization ?? '');
    if (auth?.[1]) headers.authorization = `DPoP ${auth[1]}`;
    headers.dpop = await proof(key, method, `${origin}${path}`, {
      ...(auth?.[1] ? { accessToken: auth[1] } : {}),
      ...(nonce ? { nonce } : {}),
    });
    const res = await call(origin, method, path, { ...opts, headers });
    if (res.headers['dpop-nonce']) nonce = res.headers['dpop-nonce'];
    return res;
  };
  return async (origin, method, path, opts = {}) => {
    const res = await once(origin, method, path, opts);
    const askedNonce =
      res.json?.error === 'use_dpop_nonce' ||
      /error="use_dpop_nonce"/.test(res.headers['www-authenticate'] ?? '');
    return askedNonce ? once(origin, method, path, opts) : res;
  };
}
