/**
 * Client authentication at /oauth2/token (issue 17 item 2): exactly one method per request,
 * the one the client registered.
 * - `private_key_jwt` (RFC 7523 §3): `client_assertion` signed by a registered key (EdDSA,
 *   ES256, PS256; `none` and HMAC refused), `iss` = `sub` = client id, `aud` the token endpoint
 *   URL or the issuer, `exp` at most 5 minutes ahead, `jti` used once across every core
 *   (`edge_replay`, a database table).
 * - `tls_client_auth` / `self_signed_tls_client_auth` (RFC 8705 §2): the certificate Envoy
 *   verified, forwarded by the edge (`x-client-certificate`); issued by a CA the client's tenant
 *   trusts and with the registered subject, or the registered thumbprint.
 * - `client_secret_basic` / `client_secret_post`, unless the client's tenant forbids secrets.
 * Every failure is the same `invalid_client` (no client enumeration); the reason is audited.
 */
import type { X509Certificate } from 'node:crypto';
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, type JSONWebKeySet } from 'jose';
import { verifyJwt } from '../../shared/jws.ts';
import { firstUse } from '../../shared/replay.ts';
import {
  certificateThumbprint,
  issuedByTrustedCa,
  parseForwardedCertificate,
  subjectDnOf,
  validAt,
} from '../../shared/mtls.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { findClient, secretMatches, secretMethods, type OAuthClient } from './clients.ts';
import { oauthTenantPolicy, type OAuthTenantPolicy } from './tenant-policy.ts';

export const assertionType = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
export const assertionAlgorithms = ['EdDSA', 'ES256', 'PS256'] as const;
/** Issue 17 item 2: an assertion expires at most this far ahead. */
export const maxAssertionLifetimeS = 300;
const clockSkewS = 30;

export class ClientAuthError extends Error {
  /** The registered client the request named, when there is one: its refusal is audited in its tenant. */
  client: Pick<OAuthClient, 'tenantId' | 'clientId' | 'method'> | undefined;
}

export interface ClientAuthInput {
  fields: Record<string, string>;
  basic: { id: string; secret: string } | undefined;
  /** URL-encoded PEM the edge forwarded, when the connection used mTLS. */
  certificate: string | undefined;
  /** Accepted assertion audiences: the token endpoint URL and the issuer. */
  audiences: string[];
  nowMs: number;
}

export interface Authenticated {
  client: OAuthClient;
  policy: OAuthTenantPolicy;
  method: OAuthClient['method'];
  /** The presented certificate, for binding (`cnf.x5t#S256`). */
  certificate: X509Certificate | undefined;
}

const fail = (reason: string) => new ClientAuthError(reason);

function claimedClientId(input: ClientAuthInput): { id: string; via: 'assertion' | 'secret' | 'tls' } {
  const f = input.fields;
  const given = [
    input.basic !== undefined,
    f.client_secret !== undefined,
    f.client_assertion !== undefined,
  ].filter(Boolean).length;
  if (given > 1) throw fail('more than one client authentication method');
  if (f.client_assertion !== undefined) {
    if (f.client_assertion_type !== assertionType) throw fail('unsupported client_assertion_type');
    let sub: unknown;
    try {
      sub = decodeJwt(f.client_assertion).sub;
    } catch {
      throw fail('client_assertion is not a JWT');
    }
    if (typeof sub !== 'string' || (f.client_id !== undefined && f.client_id !== sub))
      throw fail('client_assertion subject is not the client');
    return { id: sub, via: 'assertion' };
  }
  if (input.basic) {
    // A client_id beside client_secret_basic must name the client the header authenticates.
    if (f.client_id !== undefined && f.client_id !== input.basic.id)
      throw fail('client_id is not the client of the Basic credential');
    return { id: input.basic.id, via: 'secret' };
  }
  if (f.client_secret !== undefined && f.client_id) return { id: f.client_id, via: 'secret' };
  if (f.client_id) return { id: f.client_id, via: 'tls' };
  throw fail('no client authentication');
}

async function checkAssertion(
  q: Queryable,
  client: OAuthClient,
  assertion: string,
  input: ClientAuthInput,
): Promise<void> {
  let alg: string | undefined;
  try {
    alg = decodeProtectedHeader(assertion).alg;
  } catch {
    throw fail('client_assertion header unreadable');
  }
  if (!alg || !(assertionAlgorithms as readonly string[]).includes(alg))
    throw fail(`client_assertion alg ${alg ?? 'none'} is not accepted`);
  if (!client.jwks) throw fail('client has no registered keys');
  let payload: Record<string, unknown>;
  try {
    ({ payload } = await verifyJwt(assertion, createLocalJWKSet(client.jwks as unknown as JSONWebKeySet), {
      algorithms: [...assertionAlgorithms],
      issuer: client.clientId,
      subject: client.clientId,
      audience: input.audiences,
      requiredClaims: ['exp', 'jti'],
      currentDate: new Date(input.nowMs),
      clockTolerance: clockSkewS,
    }));
  } catch {
    throw fail('client_assertion does not verify (key, iss, sub, aud or exp)');
  }
  const exp = payload.exp as number;
  if (exp > input.nowMs / 1000 + maxAssertionLifetimeS + clockSkewS)
    throw fail('client_assertion expires too far ahead');
  const jti = payload.jti;
  if (typeof jti !== 'string' || jti.length < 8 || jti.length > 256)
    throw fail('client_assertion jti unusable');
  const ttlMs = (exp + clockSkewS) * 1000 - input.nowMs;
  if (!(await firstUse(q, 'client_assertion', `${client.clientId}:${jti}`, Math.max(ttlMs, 1000))))
    throw fail('client_assertion jti replayed');
}

function checkCertificate(
  client: OAuthClient,
  policy: OAuthTenantPolicy,
  cert: X509Certificate | undefined,
  nowMs: number,
): void {
  if (!cert) throw fail('no client certificate on the connection');
  if (!validAt(cert, nowMs)) throw fail('client certificate is expired or not yet valid');
  const thumbprint = certificateThumbprint(cert);
  if (client.method === 'self_signed_tls_client_auth') {
    if (thumbprint !== client.tlsThumbprint) throw fail('client certificate is not the registered one');
    return;
  }
  if (!issuedByTrustedCa(policy.trustedCas, cert, nowMs))
    throw fail("client certificate is not issued by a CA the client's tenant trusts");
  const subjectOk = client.tlsSubject !== null && subjectDnOf(cert) === client.tlsSubject;
  const thumbOk = client.tlsThumbprint !== null && thumbprint === client.tlsThumbprint;
  if (!subjectOk && !thumbOk) throw fail('client certificate subject does not match the registration');
}

/** Authenticate the client of a token request; throws ClientAuthError (answer `invalid_client`). */
export async function authenticateClient(q: Queryable, input: ClientAuthInput): Promise<Authenticated> {
  const claimed = claimedClientId(input);
  const client = await findClient(q, claimed.id);
  if (!client) throw fail('unknown or revoked client');
  try {
    return await authenticateFound(q, input, claimed, client);
  } catch (err) {
    if (err instanceof ClientAuthError) err.client = client;
    throw err;
  }
}

async function authenticateFound(
  q: Queryable,
  input: ClientAuthInput,
  claimed: ReturnType<typeof claimedClientId>,
  client: OAuthClient,
): Promise<Authenticated> {
  const policy = await oauthTenantPolicy(q, client.tenantId);
  const certificate = input.certificate ? parseForwardedCertificate(input.certificate) : undefined;
  const isSecretMethod = secretMethods.includes(client.method);
  if (claimed.via === 'secret') {
    if (!isSecretMethod) throw fail('client is not registered for a shared secret');
    if (policy.secretsForbidden) throw fail("the client's tenant forbids shared-secret authentication");
    const secret = input.basic?.secret ?? input.fields.client_secret ?? '';
    if (!secretMatches(client, secret)) throw fail('wrong client secret');
  } else if (claimed.via === 'assertion') {
    if (client.method !== 'private_key_jwt') throw fail('client is not registered for private_key_jwt');
    await checkAssertion(q, client, input.fields.client_assertion ?? '', input);
  } else {
    if (client.method !== 'tls_client_auth' && client.method !== 'self_signed_tls_client_auth')
      throw fail('client sent no credential');
    checkCertificate(client, policy, certificate, input.nowMs);
  }
  return { client, policy, method: client.method, certificate };
}
