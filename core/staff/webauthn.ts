/**
 * WebAuthn ceremonies for staff passkeys (issue 16 item 1), over @simplewebauthn/server:
 * registration from an enrolment link, sign-in with a discoverable passkey, and the assertion
 * of a step-up. User verification is required everywhere (a passkey is then a multi-factor
 * authenticator: possession plus the person's PIN or biometric). The relying-party ID and the
 * allowed origins are deployment configuration (WEBAUTHN_RP_ID, WEBAUTHN_ORIGINS).
 *
 * Challenges are 32 random bytes, single use and short-lived, kept in `webauthn_challenges`
 * (migration 0830) so any core instance finishes a ceremony another began. A step-up's WebAuthn
 * challenge is instead derived from its signed step-up challenge (SHA-256 of the token), whose
 * jti `used_challenges` consumes once.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type {
  AuthenticatorTransportFuture,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
} from '@simplewebauthn/server';
import type { Queryable } from '../../shared/db/pool.ts';

export interface WebAuthnConfig {
  /** Relying-party ID: the registrable domain staff use (never an IP address: browsers refuse it). */
  rpId: string;
  rpName: string;
  /** Origins a ceremony may come from, e.g. `https://admin.example.com`; development: `http://localhost:<gateway port>`. */
  origins: string[];
}

/** A ceremony's challenge lives this long (the browser's own timeout is the same). */
export const ceremonyTtlMs = 5 * 60_000;

const B64u = Type.String({ minLength: 1, maxLength: 8192, pattern: '^[A-Za-z0-9_-]+$' });
const Transports = Type.Optional(Type.Array(Type.String({ maxLength: 32 }), { maxItems: 8 }));
const Common = {
  id: B64u,
  rawId: B64u,
  type: Type.Literal('public-key'),
  clientExtensionResults: Type.Record(Type.String(), Type.Unknown()),
  authenticatorAttachment: Type.Optional(
    Type.Union([Type.Literal('platform'), Type.Literal('cross-platform')]),
  ),
};

/** RegistrationResponseJSON as browsers and @simplewebauthn/browser send it. */
export const RegistrationResponse = Type.Object({
  ...Common,
  response: Type.Object({
    clientDataJSON: B64u,
    attestationObject: B64u,
    transports: Transports,
    authenticatorData: Type.Optional(B64u),
    publicKey: Type.Optional(B64u),
    publicKeyAlgorithm: Type.Optional(Type.Integer()),
  }),
});

/** AuthenticationResponseJSON. */
export const AuthenticationResponse = Type.Object({
  ...Common,
  response: Type.Object({
    clientDataJSON: B64u,
    authenticatorData: B64u,
    signature: B64u,
    userHandle: Type.Optional(B64u),
  }),
});
export type RegistrationResponse = Static<typeof RegistrationResponse>;
export type AuthenticationResponse = Static<typeof AuthenticationResponse>;

/**
 * @simplewebauthn/server is loaded on the first ceremony, not at start: it adds seconds to every
 * core process's start on a loaded machine, and most requests never need it. A load that fails
 * (out of file descriptors, a package replaced under the running process) fails that request as
 * the service's error and is tried again by the next one: kept, it failed every ceremony until a
 * restart.
 */
let library: Promise<typeof import('@simplewebauthn/server')> | undefined;
const webauthn = () =>
  (library ??= import('@simplewebauthn/server').catch((err: unknown) => {
    library = undefined;
    throw err;
  }));

const ClientData = TypeCompiler.Compile(
  Type.Object({ challenge: Type.String({ minLength: 16, maxLength: 256 }) }),
);

/** The challenge the browser signed (clientDataJSON.challenge), or undefined when unreadable. */
export function challengeOf(clientDataJSON: string): string | undefined {
  try {
    const data: unknown = JSON.parse(Buffer.from(clientDataJSON, 'base64url').toString('utf8'));
    return ClientData.Check(data) ? data.challenge : undefined;
  } catch {
    return undefined;
  }
}

/** The user handle a passkey carries: the staff member's UUID as 16 bytes. */
export const userHandleOf = (userId: string): Uint8Array<ArrayBuffer> =>
  Uint8Array.from(Buffer.from(userId.replace(/-/g, ''), 'hex'));

export const stepUpWebAuthnChallenge = (challengeToken: string): string =>
  createHash('sha256').update(challengeToken, 'utf8').digest('base64url');

async function storeChallenge(
  q: Queryable,
  c: { tenantId: string; ceremony: 'register' | 'login'; userId?: string; enrolmentId?: string },
  now: number,
): Promise<string> {
  const challenge = randomBytes(32).toString('base64url');
  await q.query(
    `INSERT INTO webauthn_challenges (challenge, tenant_id, ceremony, user_id, enrolment_id, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0))`,
    [challenge, c.tenantId, c.ceremony, c.userId ?? null, c.enrolmentId ?? null, now, now + ceremonyTtlMs],
  );
  return challenge;
}

/**
 * Take a challenge out of the store (single use: deleted whether or not what follows succeeds);
 * undefined when unknown, of another tenant or ceremony, or expired.
 */
export async function consumeChallenge(
  q: Queryable,
  tenantId: string,
  ceremony: 'register' | 'login',
  challenge: string,
  now: number,
): Promise<{ userId: string | null; enrolmentId: string | null } | undefined> {
  const { rows } = await q.query<{ user_id: string | null; enrolment_id: string | null; live: boolean }>(
    `DELETE FROM webauthn_challenges WHERE challenge = $1 AND tenant_id = $2 AND ceremony = $3
     RETURNING user_id, enrolment_id, expires_at > to_timestamp($4 / 1000.0) AS live`,
    [challenge, tenantId, ceremony, now],
  );
  const r = rows[0];
  return r?.live ? { userId: r.user_id, enrolmentId: r.enrolment_id } : undefined;
}

export interface Enrollee {
  tenantId: string;
  userId: string;
  userName: string;
  displayName: string | null;
  enrolmentId: string;
}

/** Options for navigator.credentials.create: a discoverable passkey with user verification. */
export async function registrationOptions(
  q: Queryable,
  cfg: WebAuthnConfig,
  who: Enrollee,
  existing: { credentialId: string; transports: string[] }[],
  now: number,
) {
  const challenge = await storeChallenge(
    q,
    { tenantId: who.tenantId, ceremony: 'register', userId: who.userId, enrolmentId: who.enrolmentId },
    now,
  );
  return (await webauthn()).generateRegistrationOptions({
    rpName: cfg.rpName,
    rpID: cfg.rpId,
    userID: userHandleOf(who.userId),
    userName: who.userName,
    userDisplayName: who.displayName ?? who.userName,
    challenge: Buffer.from(challenge, 'base64url'),
    timeout: ceremonyTtlMs,
    attestationType: 'none',
    excludeCredentials: existing.map((c) => ({
      id: c.credentialId,
      transports: c.transports as AuthenticatorTransportFuture[],
    })),
    authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
    // EdDSA, ES256, RS256: what platform authenticators and security keys offer.
    supportedAlgorithmIDs: [-8, -7, -257],
  });
}

export interface NewCredential {
  credentialId: string;
  publicKey: Buffer;
  counter: number;
  transports: string[];
  aaguid: string;
  backedUp: boolean;
}

/** Verify a registration against its (already consumed) challenge; undefined when it does not verify. */
export async function verifyRegistration(
  cfg: WebAuthnConfig,
  response: RegistrationResponse,
  challenge: string,
): Promise<NewCredential | undefined> {
  // Outside the try: a library that cannot be loaded is the service's failure, not a bad registration.
  const lib = await webauthn();
  try {
    const r = await lib.verifyRegistrationResponse({
      response: response as Parameters<typeof verifyRegistrationResponse>[0]['response'],
      expectedChallenge: challenge,
      expectedOrigin: cfg.origins,
      expectedRPID: cfg.rpId,
      requireUserVerification: true,
    });
    if (!r.verified) return undefined;
    const c = r.registrationInfo.credential;
    return {
      credentialId: c.id,
      publicKey: Buffer.from(c.publicKey),
      counter: c.counter,
      transports: c.transports ?? [],
      aaguid: r.registrationInfo.aaguid,
      backedUp: r.registrationInfo.credentialBackedUp,
    };
  } catch {
    return undefined;
  }
}

/** Options for navigator.credentials.get; `allow` empty: the browser offers the person's passkeys. */
export async function authenticationOptions(
  cfg: WebAuthnConfig,
  challenge: string,
  allow: { credentialId: string; transports: string[] }[] = [],
) {
  return (await webauthn()).generateAuthenticationOptions({
    rpID: cfg.rpId,
    challenge: Buffer.from(challenge, 'base64url'),
    timeout: ceremonyTtlMs,
    userVerification: 'required',
    allowCredentials: allow.map((c) => ({
      id: c.credentialId,
      transports: c.transports as AuthenticatorTransportFuture[],
    })),
  });
}

/** A sign-in challenge stored for any core instance to finish. */
export async function loginOptions(q: Queryable, cfg: WebAuthnConfig, tenantId: string, now: number) {
  return authenticationOptions(cfg, await storeChallenge(q, { tenantId, ceremony: 'login' }, now));
}

export interface StoredCredential {
  credentialId: string;
  publicKey: Buffer;
  counter: number;
  transports: string[];
}

/**
 * Verify an assertion: signature over the expected challenge, origin, RP ID, user verification,
 * and a signature counter above the stored one (simplewebauthn refuses one that does not
 * increase). Returns the new counter, or undefined.
 */
export async function verifyAssertion(
  cfg: WebAuthnConfig,
  response: AuthenticationResponse,
  challenge: string,
  cred: StoredCredential,
): Promise<number | undefined> {
  // Outside the try: a library that cannot be loaded is the service's failure, not a bad assertion.
  const lib = await webauthn();
  try {
    const r = await lib.verifyAuthenticationResponse({
      response: response as Parameters<typeof verifyAuthenticationResponse>[0]['response'],
      expectedChallenge: challenge,
      expectedOrigin: cfg.origins,
      expectedRPID: cfg.rpId,
      requireUserVerification: true,
      credential: {
        id: cred.credentialId,
        publicKey: new Uint8Array(cred.publicKey),
        counter: cred.counter,
        transports: cred.transports as AuthenticatorTransportFuture[],
      },
    });
    return r.verified ? r.authenticationInfo.newCounter : undefined;
  } catch {
    return undefined;
  }
}
