/**
 * PINs typed on USSD are verified like any login (SPEC 5.2, 8): the same argon2id PinHasher
 * (its semaphore), the same lockout counters as the app login for that subject (customer: the
 * tenant+phone HMAC key; agent: the agent-code HMAC key), counted before the check and taken
 * back after a success or when the service fails before answering (throttle.ts judgedAttempt),
 * and every attempt audited (never the PIN). The source address is the gateway's, shared by
 * every subscriber, so it is not counted (it would lock everyone out).
 */
import { AppError } from '../../../shared/errors.ts';
import { auditAuth, phoneKeyOf, phoneRef } from '../../identity/context.ts';
import { pinResetHold, utcMinute } from '../../identity/pin-hold.ts';
import { SemaphoreFull } from '../../identity/semaphore.ts';
import {
  admitAll,
  judgedAttempt,
  phonePolicy,
  settleSuccess,
  type Check,
  type Refusal,
} from '../../identity/throttle.ts';
import { agentKeyOf, agentRef } from '../auth.ts';
import { auditAgent, type AgentDeps, type AnyCtx } from '../context.ts';
import { end } from './protocol.ts';

export interface PinSubject {
  kind: 'customer' | 'agent';
  tenantId: string;
  id: string;
  /** Phone (customer) or agent code: what the lockout is keyed on. */
  handle: string;
  stored: { hash: Buffer; salt: Buffer; kdfVersion: number } | undefined;
}

/** True when `pin` is right; throws LOCKED / VERIFICATION_REQUIRED while locked out. */
export async function verifyUssdPin(
  deps: AgentDeps,
  ctx: AnyCtx,
  s: PinSubject,
  pin: string,
  sessionId: string,
): Promise<boolean> {
  const { db, identity } = deps;
  const secrets = await identity.secrets.get(s.tenantId);
  if (!secrets) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
  const key =
    s.kind === 'customer'
      ? phoneKeyOf(secrets, s.tenantId, s.handle)
      : agentKeyOf(secrets, s.tenantId, s.handle);
  const ref = s.kind === 'customer' ? phoneRef(key) : agentRef(key);
  const checks: Check[] = [{ scope: 'phone', key, policy: phonePolicy }];
  const record = (allow: boolean, outcome: string) => ({
    tenantId: s.tenantId,
    action: `${s.kind === 'customer' ? 'auth' : 'agent.auth'}.ussd_pin`,
    actor: { type: s.kind, id: s.id },
    target: { type: s.kind === 'customer' ? 'phone' : 'agent_code', id: ref },
    allow,
    attrs: { channel: 'ussd', ussd_session: sessionId, outcome },
    requestId: ctx.requestId,
  });
  // A refusal changes nothing here: its record is a transaction of its own.
  const audit = (allow: boolean, outcome: string, t: number) =>
    db.tx((q) => auditAuth(q, record(allow, outcome), t));
  const start = deps.now();
  const gate = await db.tx(async (q) => admitAll(q, s.tenantId, checks, start));
  if (!gate.ok) {
    await audit(false, gate.reason, start);
    throw refused(gate);
  }
  // Counted on admission; taken back if the service fails before the attempt is answered (the
  // PIN queue full, a hash or a record that failed): only the subscriber's own failures count.
  const admitted = { tenantId: s.tenantId, checks, at: start, epochs: gate.epochs };
  return judgedAttempt(deps, admitted, async (answered) => {
    let ok: boolean;
    try {
      ok = s.stored
        ? await identity.pins.verify(pin, secrets.pin, s.stored)
        : await identity.pins.verifyDummy(pin, secrets.pin);
    } catch (err) {
      if (err instanceof SemaphoreFull) throw new AppError('SERVICE_UNAVAILABLE', 'busy');
      throw err;
    }
    const t = deps.now();
    if (!ok) {
      // A PIN judged wrong stays counted, whatever becomes of its record.
      answered();
      await audit(false, s.stored ? 'bad_pin' : 'no_pin', t);
      return false;
    }
    // The counters cleared and the success recorded commit together; attempts counted since this
    // one's admission that locked the key or made it need an OTP refuse it (throttle.ts
    // settleSuccess), as if it came after them.
    const settled = await db.tx(async (q) => {
      const r = await settleSuccess(q, admitted, deps.now);
      await auditAuth(q, record(r.ok, r.ok ? 'success' : r.reason), r.ok ? t : deps.now());
      return r;
    });
    answered();
    if (!settled.ok) throw refused(settled);
    return true;
  });
}

/** The answer to a PIN refused by its lockout counters (VERIFICATION_REQUIRED or LOCKED). */
const refused = (r: Refusal): AppError =>
  new AppError(
    r.reason === 'verification_required' ? 'VERIFICATION_REQUIRED' : 'LOCKED',
    'too many failed PIN attempts',
  );

/**
 * Issue 13 item 1: during a PIN-reset hold (identity/pin-hold.ts) a customer's PIN, even the
 * right one, moves no money on USSD: USSD is PIN alone, and a SIM swapper can reset the PIN with
 * the victim's SMS. Answers the audited END refusal during the hold, undefined otherwise; asked
 * only after the PIN was verified, so a wrong PIN learns nothing about the hold.
 */
export async function heldPinRefusal(
  deps: AgentDeps,
  ctx: AnyCtx,
  tenantId: string,
  customerId: string,
  operation: string,
  sessionId: string,
): Promise<string | undefined> {
  const t = deps.now();
  const hold = await pinResetHold(deps.db, tenantId, customerId, t);
  if (!hold) return undefined;
  await deps.db.tx((q) =>
    auditAgent(
      q,
      {
        tenantId,
        actor: { type: 'customer', id: customerId },
        action: `ussd.${operation}`,
        target: { type: 'customer', id: customerId },
        allow: false,
        attrs: {
          channel: 'ussd',
          ussd_session: sessionId,
          outcome: 'pin_reset_hold',
          hold_until: hold.until.toISOString(),
        },
        requestId: ctx.requestId,
      },
      t,
    ),
  );
  return end(
    `Your PIN was changed recently. For your safety it can approve payments from ${utcMinute(hold.until)} UTC.`,
  );
}
