/**
 * PIN login (SPEC 3 session "login", 5.2). Guarantees:
 * - Unknown tenant, unknown phone, phone without a PIN, inactive customer and wrong PIN all
 *   answer the same 401 INVALID_CREDENTIALS body after the same argon2 work (a dummy hash).
 * - Lockout (throttle.ts) counts per tenant+phone (HMAC) and device, and is applied identically
 *   to unknown phones, so a locked answer does not reveal a customer. The source address is
 *   only throttled past a carrier-NAT-sized threshold (address-throttle.ts; issue 13 item 4).
 * - A right PIN judged after attempts counted since its admission locked the phone or device or
 *   made the phone need an OTP (throttle.ts settleSuccess) opens no session and clears neither: it
 *   is answered their refusal (403 VERIFICATION_REQUIRED, the OTP step; 429 LOCKED).
 * - A right PIN whose PIN was reset before it settled (pin/set revokes every session it sees) opens
 *   no session: it is answered and counted as a wrong PIN (401), audited `pin_changed`.
 * - Every attempt writes an audit record; none contains the PIN.
 * - An older kdf_version is rehashed after the response, off the login's path.
 */
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { stepUpMethods } from './bound.ts';
import { issueChallenge, origOf, type StepUpMethod } from '../../shared/challenge.ts';
import { auditAuth, clientIpOf, inBackground, phoneKeyOf, phoneRef, type IdentityDeps } from './context.ts';
import { addressCheck } from './address-throttle.ts';
import { lookupKey, type TenantSecrets } from './secrets.ts';
import { needsRehash, currentKdfVersion, type PinSlot } from './pin.ts';
import { createSession } from './sessions.ts';
import {
  admitAll,
  loginPolicy,
  phonePolicy,
  refusalError,
  judgedAttempt,
  settleFailure,
  settleSuccess,
  type Admitted,
  type Check,
} from './throttle.ts';
import { accessTtlS, issueAccessToken } from './tokens.ts';
import { tenantSettings } from './settings.ts';
import { SemaphoreFull } from './semaphore.ts';
import { signInBinding } from '../http/dpop.ts';
import type { Queryable } from '../../shared/db/pool.ts';

export interface LoginInput {
  tenantId: string;
  phone: string;
  pin: string;
}

export interface LoginResult {
  accessToken: string;
  refreshToken: string;
  expiresIn: number;
  /** `DPoP` when the tokens are bound to the proof's key (RFC 9449 §5), else `Bearer`. */
  tokenType: 'Bearer' | 'DPoP';
  sessionId: string;
  aal: number;
  mfaRequired?: boolean;
  challenge?: string;
  methods?: StepUpMethod[];
}

const invalid = () => new AppError('INVALID_CREDENTIALS', 'invalid credentials');

interface CredentialRow {
  id: string;
  status: string;
  pin_hash: Buffer | null;
  pin_salt: Buffer | null;
  kdf_version: number | null;
  /** When the PIN was set, in microseconds since the epoch (a reset changes it, a rehash does not). */
  pin_set_us: string | null;
}

/**
 * Run a PIN check through the argon2 gate. Past its capacity the answer is an immediate 429
 * with Retry-After (issue 18 item 4): the caller is told to come back, never left to time out,
 * and the refusal costs no hash, so other routes keep their share of the machine.
 */
export async function gated<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof SemaphoreFull) throw busy();
    throw err;
  }
}

const busy = () =>
  new AppError('RATE_LIMITED', 'sign-in is busy; retry shortly', { headers: { 'retry-after': '1' } });

export async function login(
  deps: IdentityDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  input: LoginInput,
): Promise<LoginResult> {
  const { db } = deps;
  const { tenantId, pin } = input;
  // Past capacity the refusal costs no database work either (issue 18 item 4): under a burst,
  // refused logins would otherwise queue for the pool beside the admitted ones. Every tenant,
  // known or not, is refused alike, so this tells nothing about the tenant or the phone.
  if (deps.pins.gate.full) throw busy();
  const settings = await tenantSettings(db, tenantId);
  const secrets = settings?.active ? await deps.secrets.get(tenantId) : undefined;
  if (!settings || !secrets) {
    // No tenant to count or audit against: spend the same work and answer the same.
    await gated(() => deps.pins.verifyDummy(pin, undefined));
    deps.log.info({ reqId: ctx.requestId, outcome: 'unknown_tenant' }, 'login refused');
    throw invalid();
  }
  // Issue 17 item 3: a proof binds the session; require_dpop refuses a sign-in without one.
  const pop = await signInBinding(deps, ctx, settings);
  const ip = clientIpOf(ctx);
  const device = ctx.identity.deviceId;
  // The PIN gate's slot is taken before the attempt is counted: a login turned away for load
  // (429 at once) counts nothing toward the phone's lockout.
  const slot = await gated(() => deps.pins.reserve());
  try {
    return await admitted(deps, ctx, input, { settings, secrets, ip, device, slot, pop });
  } finally {
    slot.release();
  }
}

/** The login once a slot of the PIN gate is held: admission (counted), the PIN, the session. */
async function admitted(
  deps: IdentityDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  input: LoginInput,
  t0: {
    settings: NonNullable<Awaited<ReturnType<typeof tenantSettings>>>;
    secrets: TenantSecrets;
    ip: string;
    device: string | undefined;
    slot: PinSlot;
    pop: { jkt: string } | undefined;
  },
): Promise<LoginResult> {
  const { db } = deps;
  const { tenantId, phone } = input;
  const { settings, secrets, ip, device, slot } = t0;
  const phoneKey = phoneKeyOf(secrets, tenantId, phone);
  const checks = loginChecks(secrets, tenantId, phoneKey, ip, device, settings.addressThrottle);
  const anon = { type: 'anonymous', id: phoneRef(phoneKey) };
  const audit = loginAudit(ctx, tenantId, { ip, device: device ?? null, phone: phoneRef(phoneKey) }, anon);

  const start = deps.now();
  const gate = await db.tx(async (q) => {
    const g = await admitAll(q, tenantId, checks, start);
    if (!g.ok) await auditAuth(q, audit(false, g.reason), start);
    return g;
  });
  if (!gate.ok) throw refusalError(gate);
  const admitted = { tenantId, checks, at: start, epochs: gate.epochs };

  // Counted on admission; taken back if the service fails before the attempt is answered.
  return judgedAttempt(deps, admitted, async (answered) => {
    const { usable, ok } = await checkPin(deps, input, slot, secrets.pin);
    const t = deps.now();
    if (!ok || !usable) {
      // A PIN judged wrong stays counted, whatever becomes of its record.
      answered();
      await db.tx(async (q) => {
        await settleFailure(q, tenantId, checks, t);
        await auditAuth(
          q,
          audit(
            false,
            usable ? 'bad_pin' : 'unknown_or_no_pin',
            usable ? { type: 'customer', id: usable.id } : anon,
          ),
          t,
        );
      });
      throw invalid();
    }
    return signedIn(deps, input, { ...t0, admitted, audit, usable, t, answered });
  });
}

/** A right PIN: the access token, the counters settled, the session and its record; then the rest. */
async function signedIn(
  deps: IdentityDeps,
  input: LoginInput,
  s: {
    settings: NonNullable<Awaited<ReturnType<typeof tenantSettings>>>;
    secrets: TenantSecrets;
    ip: string;
    device: string | undefined;
    pop: { jkt: string } | undefined;
    /** The attempt as admitted: its counts are taken back. */
    admitted: Admitted;
    audit: ReturnType<typeof loginAudit>;
    usable: CredentialRow;
    t: number;
    answered: () => void;
  },
): Promise<LoginResult> {
  const { tenantId, pin } = input;
  const { settings, secrets, ip, device, pop, admitted, audit, usable, t } = s;
  const cnf = pop ? { jkt: pop.jkt } : undefined;
  const customerId = usable.id;
  const sessionId = uuidv7(t);
  const mfaPending = settings.mfaRequiredForAll;
  const access = await issueAccessToken(
    deps.keys,
    { tenantId, sub: customerId, sid: sessionId, aal: 1, amr: ['pin'], ...(cnf ? { cnf } : {}) },
    t,
  );
  const actor = { type: 'customer', id: customerId };
  const opened = await deps.db.tx(async (q) => {
    // The PIN judged is the one still set (locked against a reset until this commits): a reset
    // since (OTP verification, then pin/set) revoked every session it saw, so a session opened
    // now with the PIN it replaced would outlive it. Judged wrong, as if it came after the reset.
    if (!(await pinStillSet(q, tenantId, usable))) {
      await settleFailure(q, tenantId, admitted.checks, t);
      await auditAuth(q, audit(false, 'pin_changed', actor), t);
      return 'pin_changed' as const;
    }
    const settled = await settleSuccess(q, admitted, deps.now);
    // Attempts counted since this one's admission locked the phone or device or made the phone need
    // an OTP: the right PIN is answered as if it came after them (the OTP step), with no session.
    if (!settled.ok) {
      await auditAuth(q, audit(false, settled.reason, actor), deps.now());
      return settled;
    }
    const rt = await createSession(
      q,
      sessionId,
      { tenantId, customerId, jti: access.jti, aal: 1, mfaPending, device, ip, dpopJkt: pop?.jkt },
      t,
    );
    await auditAuth(
      q,
      { ...audit(true, 'success', actor, 1), target: { type: 'session', id: sessionId } },
      t,
    );
    return { ok: true as const, refreshToken: rt };
  });
  s.answered();
  if (opened === 'pin_changed') throw invalid();
  if (!opened.ok) throw refusalError(opened);
  const { refreshToken } = opened;
  if (needsRehash(usable.kdf_version as number)) {
    inBackground(deps, 'pin rehash', () =>
      rehash(deps, tenantId, customerId, pin, secrets.pin, usable.kdf_version as number),
    );
  }
  const out: LoginResult = {
    accessToken: access.token,
    refreshToken,
    expiresIn: accessTtlS,
    tokenType: cnf ? 'DPoP' : 'Bearer',
    sessionId,
    aal: 1,
  };
  if (mfaPending) await oweMfa(deps, out, tenantId, customerId, t);
  return out;
}

/** What a login is counted against: the phone, the address and, when the client names one, the device. */
function loginChecks(
  secrets: TenantSecrets,
  tenantId: string,
  phoneKey: Buffer,
  ip: string,
  device: string | undefined,
  addressThrottle: Parameters<typeof addressCheck>[3],
): Check[] {
  const checks: Check[] = [
    { scope: 'phone', key: phoneKey, policy: phonePolicy },
    addressCheck(secrets, tenantId, ip, addressThrottle),
  ];
  if (device)
    checks.push({
      scope: 'device',
      key: lookupKey(secrets.lookup, 'device', tenantId, device),
      policy: loginPolicy,
    });
  return checks;
}

/** The audit record of a login outcome (the phone by reference only, never in clear). */
function loginAudit(
  ctx: RequestContext<unknown, unknown, unknown>,
  tenantId: string,
  attrs: { ip: string; device: string | null; phone: string },
  anon: { type: string; id: string },
) {
  const target = { type: 'phone', id: anon.id };
  return (allow: boolean, outcome: string, actor = anon, aal?: number) => ({
    tenantId,
    action: 'auth.login',
    actor,
    target,
    allow,
    attrs: { ...attrs, outcome },
    requestId: ctx.requestId,
    ...(aal ? { aal } : {}),
  });
}

/** The phone's customer and its PIN checked in the held slot (a dummy check when there is none). */
async function checkPin(
  deps: IdentityDeps,
  input: LoginInput,
  slot: PinSlot,
  pepper: Buffer,
): Promise<{ usable: CredentialRow | undefined; ok: boolean }> {
  const { tenantId, phone, pin } = input;
  const { rows } = await deps.db.query<CredentialRow>(
    `SELECT c.id, c.status, cr.pin_hash, cr.pin_salt, cr.kdf_version,
            (extract(epoch FROM cr.pin_set_at) * 1000000)::bigint::text AS pin_set_us FROM customers c
     LEFT JOIN credentials cr ON cr.tenant_id = c.tenant_id AND cr.customer_id = c.id
     WHERE c.tenant_id = $1 AND c.phone_e164 = $2`,
    [tenantId, phone],
  );
  const row = rows[0];
  const usable =
    row && row.status === 'active' && row.pin_hash && row.pin_salt && row.kdf_version !== null
      ? row
      : undefined;
  const ok = usable
    ? await slot.verify(pin, pepper, {
        hash: usable.pin_hash as Buffer,
        salt: usable.pin_salt as Buffer,
        kdfVersion: usable.kdf_version as number,
      })
    : await slot.verifyDummy(pin, pepper);
  return { usable, ok };
}

/**
 * Whether the PIN `usable` was read with is still the customer's, its credential row locked
 * (FOR SHARE) until the caller's transaction ends: a reset (pin/set locks the row FOR UPDATE)
 * either committed before, and this answers false, or waits for the caller and then revokes the
 * session the caller opened. Every hash has a salt of its own: the same salt is the same PIN
 * setting; a new one with the same pin_set_at and a newer kdf_version is its rehash (`rehash`).
 */
async function pinStillSet(q: Queryable, tenantId: string, usable: CredentialRow): Promise<boolean> {
  const { rows } = await q.query(
    `SELECT 1 FROM credentials WHERE tenant_id = $1 AND customer_id = $2 AND (pin_salt = $3
        OR (kdf_version > $4 AND (extract(epoch FROM pin_set_at) * 1000000)::bigint::text = $5)) FOR SHARE`,
    [tenantId, usable.id, usable.pin_salt, usable.kdf_version, usable.pin_set_us],
  );
  return rows.length > 0;
}

/** SPEC 2.10 mfa_required_for_all_users: the session must step up before it is refreshed. */
async function oweMfa(
  deps: IdentityDeps,
  out: LoginResult,
  tenantId: string,
  customerId: string,
  t: number,
): Promise<void> {
  const methods = await stepUpMethods(deps.db, tenantId, customerId, t);
  out.mfaRequired = true;
  out.methods = methods;
  out.challenge = await issueChallenge(
    deps.keys.challenges,
    { tenantId, sub: customerId, orig: origOf('POST', '/customers/auth/login', ''), methods },
    t,
  );
}

/** Recompute a legacy hash with the current parameters, unless the PIN changed meanwhile. */
async function rehash(
  deps: IdentityDeps,
  tenantId: string,
  customerId: string,
  pin: string,
  pepper: Buffer,
  fromVersion: number,
): Promise<void> {
  const ph = await deps.pins.hash(pin, pepper, currentKdfVersion);
  await deps.db.query(
    `UPDATE credentials SET pin_hash = $3, pin_salt = $4, kdf_version = $5
     WHERE tenant_id = $1 AND customer_id = $2 AND kdf_version = $6`,
    [tenantId, customerId, ph.hash, ph.salt, ph.kdfVersion, fromVersion],
  );
}
