/**
 * Passkey sign-in, enrolment and step-up for staff (issue 16 items 1–2; SPEC 4.4 `/auth/login`,
 * `/auth/mfa/challenge`, `/auth/mfa/complete`). Order of checks on an assertion:
 *   1. the challenge in clientDataJSON is taken from the store (single use; sign-in) or is the
 *      hash of a verified step-up challenge for this person (step-up);
 *   2. the credential is a passkey of this tenant (a removed one is gone) and, for a step-up,
 *      of the signed-in person; the user handle, when sent, names the same person;
 *   3. the person is active and not deleted (a deprovisioned user cannot sign in or step up);
 *   4. signature, origin, RP ID, user verification and an increasing counter (webauthn.ts);
 *   5. the new counter is recorded only if unchanged since read (a concurrent replay loses).
 * Sign-in failures share one answer (401 INVALID_CREDENTIALS, SPEC 7.2); the audit record
 * names the reason. A passkey with user verification is multi-factor: sign-in is AAL 2.
 */
import type { Logger } from 'pino';
import { appendAudit } from '../../shared/audit.ts';
import { origOf, verifyChallenge, issueChallenge, challengeTtlS } from '../../shared/challenge.ts';
import type { Db, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { StaffCaller } from './auth.ts';
import { liveLink, useLink } from './enrolment.ts';
import { addPasskey, passkeyByCredential, passkeysOf, recordUse, type Passkey } from './passkeys.ts';
import { staffSubject, staffUserById, type StaffUser } from './store.ts';
import { startStaffSession, stepUpStaffSession, type StaffTokens } from './tokens.ts';
import {
  authenticationOptions,
  challengeOf,
  consumeChallenge,
  loginOptions,
  registrationOptions,
  stepUpWebAuthnChallenge,
  userHandleOf,
  verifyAssertion,
  verifyRegistration,
  type AuthenticationResponse,
  type RegistrationResponse,
  type WebAuthnConfig,
} from './webauthn.ts';

export interface StaffDeps {
  db: Db;
  keys: KeyStore;
  now: () => number;
  log: Logger;
  webauthn: WebAuthnConfig;
}

/** Who is asking and from where, for audit records. */
export interface Origin {
  ip: string;
  requestId: string;
}

/** What a passkey sign-in and step-up count as (RFC 8176 has no passkey value; `hwk`/`swk` would guess at sync). */
export const passkeyAmr = ['passkey'];

async function audit(
  q: TxClient,
  tenantId: string,
  actor: { type: string; id: string },
  action: string,
  target: { type: string; id: string },
  allow: boolean,
  attrs: Record<string, unknown>,
  now: number,
): Promise<void> {
  await appendAudit(q, [
    {
      tenantId,
      actor,
      action,
      target,
      decision: { allow, ...(allow ? { aal: 2 } : {}) },
      attrs,
      ts: new Date(now),
    },
  ]);
}

type Checked =
  | { ok: true; passkey: Passkey; user: StaffUser; counter: number }
  | { ok: false; reason: string; userId?: string };

/** Steps 2–4 of the file comment; nothing is written. */
async function checkAssertion(
  deps: StaffDeps,
  tenantId: string,
  response: AuthenticationResponse,
  challenge: string,
  onlyUser?: string,
): Promise<Checked> {
  const passkey = await passkeyByCredential(deps.db, tenantId, response.id);
  if (!passkey) return { ok: false, reason: 'unknown_passkey' };
  if (onlyUser !== undefined && passkey.userId !== onlyUser)
    return { ok: false, reason: 'passkey_of_another_user', userId: onlyUser };
  const handle = response.response.userHandle;
  if (handle !== undefined && handle !== Buffer.from(userHandleOf(passkey.userId)).toString('base64url'))
    return { ok: false, reason: 'user_handle_mismatch', userId: passkey.userId };
  const user = await staffUserById(deps.db, tenantId, passkey.userId);
  if (!user || user.deletedAt || !user.active)
    return { ok: false, reason: 'user_inactive', userId: passkey.userId };
  const counter = await verifyAssertion(deps.webauthn, response, challenge, passkey);
  if (counter === undefined) return { ok: false, reason: 'assertion_invalid', userId: passkey.userId };
  return { ok: true, passkey, user, counter };
}

/** `/auth/login` passkey begin: options for a discoverable passkey of this tenant. */
export async function passkeyLoginBegin(deps: StaffDeps, tenantId: string) {
  const exists = await deps.db.query('SELECT 1 FROM tenants WHERE id = $1', [tenantId]);
  // An unknown tenant gets options too (never usable): sign-in does not reveal which tenants exist.
  if (exists.rows.length === 0)
    return authenticationOptions(deps.webauthn, Buffer.alloc(32).toString('base64url'));
  return loginOptions(deps.db, deps.webauthn, tenantId, deps.now());
}

/** `/auth/login` passkey finish: a session and tokens (AAL 2), or 401 INVALID_CREDENTIALS. */
export async function passkeyLoginFinish(
  deps: StaffDeps,
  tenantId: string,
  response: AuthenticationResponse,
  from: Origin,
  pop?: { jkt: string },
): Promise<StaffTokens> {
  const t = deps.now();
  const fail = async (reason: string, userId?: string): Promise<never> => {
    const actor = userId ? { type: 'staff', id: staffSubject(userId) } : { type: 'anonymous', id: from.ip };
    const known = await deps.db.query('SELECT 1 FROM tenants WHERE id = $1', [tenantId]);
    // A refusal changes nothing: its record is a transaction of its own.
    if (known.rows.length > 0)
      await deps.db.tx((q) =>
        audit(
          q,
          tenantId,
          actor,
          'staff.login',
          { type: 'staff_user', id: userId ?? 'unknown' },
          false,
          { method: 'passkey', reason, ip: from.ip, requestId: from.requestId },
          t,
        ),
      );
    throw new AppError('INVALID_CREDENTIALS', 'the passkey could not sign you in');
  };
  const challenge = challengeOf(response.response.clientDataJSON);
  if (!challenge || !(await consumeChallenge(deps.db, tenantId, 'login', challenge, t)))
    return fail('challenge_unknown_or_used');
  const c = await checkAssertion(deps, tenantId, response, challenge);
  if (!c.ok) return fail(c.reason, c.userId);
  const tokens = await deps.db.tx(async (q) => {
    if (!(await recordUse(q, c.passkey, c.counter, t))) return undefined;
    const s = await startStaffSession(
      q,
      deps.keys,
      {
        tenantId,
        userId: c.user.id,
        aal: 2,
        amr: passkeyAmr,
        ip: from.ip,
        method: 'passkey',
        ...(pop ? { cnf: { jkt: pop.jkt } } : {}),
      },
      t,
    );
    await audit(
      q,
      tenantId,
      { type: 'staff', id: staffSubject(c.user.id) },
      'staff.login',
      { type: 'session', id: s.sessionId },
      true,
      { method: 'passkey', passkey: c.passkey.id, ip: from.ip, requestId: from.requestId },
      t,
    );
    return s;
  });
  return tokens ?? fail('counter_race', c.user.id);
}

/** Enrolment begin: registration options for the link's person (the link stays usable until a passkey is stored). */
export async function enrolmentBegin(deps: StaffDeps, tenantId: string, token: string) {
  const t = deps.now();
  const link = await liveLink(deps.db, tenantId, token, t);
  const existing = await passkeysOf(deps.db, tenantId, link.user.id);
  const options = await registrationOptions(
    deps.db,
    deps.webauthn,
    {
      tenantId,
      userId: link.user.id,
      userName: link.user.userName,
      displayName: link.user.displayName,
      enrolmentId: link.id,
    },
    existing,
    t,
  );
  return { options, userName: link.user.userName };
}

/** Enrolment finish: verify the new credential and store it, using the link up (single use). */
export async function enrolmentFinish(
  deps: StaffDeps,
  tenantId: string,
  token: string,
  response: RegistrationResponse,
  name: string | undefined,
  from: Origin,
) {
  const t = deps.now();
  const link = await liveLink(deps.db, tenantId, token, t);
  const challenge = challengeOf(response.response.clientDataJSON);
  const stored = challenge ? await consumeChallenge(deps.db, tenantId, 'register', challenge, t) : undefined;
  if (!challenge || !stored || stored.enrolmentId !== link.id)
    throw new AppError(
      'ENROLMENT_INVALID',
      'this registration was not started from this enrolment link, or it expired; start again',
    );
  const cred = await verifyRegistration(deps.webauthn, response, challenge);
  if (!cred)
    throw new AppError(
      'VALIDATION_FAILED',
      'the passkey registration did not verify (origin, relying party or user verification)',
    );
  return deps.db.tx(async (q) => {
    // Locked and checked again: two finishes with one link store one passkey.
    await liveLink(q, tenantId, token, t, true);
    if (await passkeyByCredential(q, tenantId, cred.credentialId))
      throw new AppError('CONFLICT', 'this passkey is already registered');
    const id = await addPasskey(
      q,
      tenantId,
      link.user.id,
      cred,
      name ?? `Passkey ${new Date(t).toISOString().slice(0, 10)}`,
      t,
    );
    await useLink(q, tenantId, link.id, t);
    await audit(
      q,
      tenantId,
      { type: 'staff', id: staffSubject(link.user.id) },
      'staff.passkey.register',
      { type: 'passkey', id },
      true,
      { link: link.id, ip: from.ip, requestId: from.requestId },
      t,
    );
    return { id, userName: link.user.userName };
  });
}

/** The request a step-up is for, as the client names it (SPEC 4.3 `orig`). */
export interface NamedRequest {
  method: string;
  path: string;
  body?: string | undefined;
}

/** `/auth/mfa/challenge`: a challenge bound to the named request, and passkey options derived from it. */
export async function staffStepUpChallenge(
  deps: StaffDeps,
  caller: StaffCaller,
  req: NamedRequest,
  from: Origin,
) {
  const t = deps.now();
  const orig = origOf(req.method, req.path, req.body ?? '');
  const challenge = await issueChallenge(
    deps.keys.challenges,
    { tenantId: caller.tenantId, sub: caller.user.id, orig, methods: ['passkey'] },
    t,
  );
  const mine = await passkeysOf(deps.db, caller.tenantId, caller.user.id);
  const publicKey = await authenticationOptions(deps.webauthn, stepUpWebAuthnChallenge(challenge), mine);
  // The challenge is stateless (signed): its record is all this writes, in a transaction of its own.
  await deps.db.tx((q) =>
    audit(
      q,
      caller.tenantId,
      { type: 'staff', id: staffSubject(caller.user.id) },
      'staff.mfa_challenge',
      { type: 'session', id: caller.sessionId },
      true,
      { method: req.method.toUpperCase(), path: req.path, orig, ip: from.ip, requestId: from.requestId },
      t,
    ),
  );
  return { challenge, methods: ['passkey'], orig, expiresIn: challengeTtlS, publicKey };
}

/**
 * `/auth/mfa/complete`: a passkey assertion over a challenge (from /auth/mfa/challenge or an
 * edge's 403 MFA_REQUIRED) becomes a short AAL 2 token carrying its `orig`; the challenge jti is
 * used up with it.
 */
export async function staffStepUpComplete(
  deps: StaffDeps,
  caller: StaffCaller,
  challengeToken: string,
  response: AuthenticationResponse,
  from: Origin,
) {
  const t = deps.now();
  const claims = await verifyChallenge(deps.keys.challenges, challengeToken, {
    tenantId: caller.tenantId,
    sub: caller.user.id,
  });
  if (!claims.methods.includes('passkey'))
    throw new AppError('challenge_mismatch', 'this challenge does not offer a passkey');
  const actor = { type: 'staff', id: staffSubject(caller.user.id) };
  const note = (q: TxClient, allow: boolean, outcome: string) =>
    audit(
      q,
      caller.tenantId,
      actor,
      'staff.stepup',
      { type: 'session', id: caller.sessionId },
      allow,
      {
        method: 'passkey',
        outcome,
        challenge: claims.jti,
        orig: claims.orig,
        ip: from.ip,
        requestId: from.requestId,
      },
      t,
    );
  // A refused step-up changes nothing: its record is a transaction of its own.
  const refused = (outcome: string) => deps.db.tx((q) => note(q, false, outcome));
  const c = await checkAssertion(
    deps,
    caller.tenantId,
    response,
    stepUpWebAuthnChallenge(challengeToken),
    caller.user.id,
  );
  if (!c.ok) {
    await refused(c.reason);
    throw new AppError('INVALID_CREDENTIALS', 'the passkey assertion is not valid for this challenge');
  }
  const out = await deps.db.tx(async (q) => {
    const used = await q.query(
      `INSERT INTO used_challenges (tenant_id, jti, used_at, expires_at) VALUES ($1, $2, to_timestamp($3 / 1000.0), to_timestamp($4))
       ON CONFLICT DO NOTHING RETURNING jti`,
      [caller.tenantId, claims.jti, t, claims.exp],
    );
    if (used.rows.length === 0) return 'challenge_reused' as const;
    if (!(await recordUse(q, c.passkey, c.counter, t))) return 'counter_race' as const;
    const token = await stepUpStaffSession(
      q,
      deps.keys,
      {
        tenantId: caller.tenantId,
        userId: caller.user.id,
        sessionId: caller.sessionId,
        amr: passkeyAmr,
        orig: claims.orig,
        ...(caller.cnf ? { cnf: caller.cnf } : {}),
      },
      t,
    );
    await note(q, true, 'stepped_up');
    return token;
  });
  if (out === 'challenge_reused' || out === 'counter_race') {
    await refused(out);
    throw out === 'challenge_reused'
      ? new AppError('challenge_mismatch', 'challenge token was already used')
      : new AppError('INVALID_CREDENTIALS', 'the passkey assertion was already used');
  }
  return { ...out, orig: claims.orig };
}
