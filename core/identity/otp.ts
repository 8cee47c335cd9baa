/**
 * One-time codes (SPEC 3, 8; issue 3): 6 digits, stored as an HMAC under the tenant's OTP key,
 * valid 5 minutes, single use, at most `otpMaxAttempts` guesses per code. Sending a new code
 * retires the previous live one (one live code per phone and purpose), and the per-phone
 * failure counter lives in `auth_throttle` so a new code never resets it.
 */
import { createHmac, randomInt, timingSafeEqual } from 'node:crypto';
import type { Queryable } from '../../shared/db/pool.ts';
import { uuidv7 } from '../../shared/uuid.ts';

export const otpDigits = 6;
export const otpTtlMs = 5 * 60_000;
export const otpMaxAttempts = 5;

export type OtpPurpose = 'verify' | 'stepup';

export interface OtpTarget {
  tenantId: string;
  phoneKey: Buffer;
  purpose: OtpPurpose;
  /** Step-up codes are bound to one challenge. */
  challengeJti?: string;
}

function codeHash(otpKey: Buffer, id: string, code: string): Buffer {
  return createHmac('sha256', otpKey).update(`${id}|${code}`).digest();
}

/** Store a fresh code for `t` (retiring the live one) and return it for the sender only. */
export async function issueOtp(q: Queryable, t: OtpTarget, otpKey: Buffer, now: number): Promise<string> {
  const code = String(randomInt(0, 10 ** otpDigits)).padStart(otpDigits, '0');
  const id = uuidv7(now);
  await q.query(
    `UPDATE otp_codes SET consumed_at = to_timestamp($4 / 1000.0)
     WHERE tenant_id = $1 AND phone_key = $2 AND purpose = $3 AND consumed_at IS NULL`,
    [t.tenantId, t.phoneKey, t.purpose, now],
  );
  await q.query(
    `INSERT INTO otp_codes (id, tenant_id, phone_key, purpose, challenge_jti, code_hash, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7 / 1000.0), to_timestamp($8 / 1000.0))`,
    [
      id,
      t.tenantId,
      t.phoneKey,
      t.purpose,
      t.challengeJti ?? null,
      codeHash(otpKey, id, code),
      now,
      now + otpTtlMs,
    ],
  );
  return code;
}

/**
 * Check `code` against the live code of `t`, inside the caller's transaction (commit it even on
 * a false answer: the attempt count must stick). A match consumes the code.
 */
export async function checkOtp(
  q: Queryable,
  t: OtpTarget,
  code: string,
  otpKey: Buffer,
  now: number,
): Promise<boolean> {
  const { rows } = await q.query<{
    id: string;
    code_hash: Buffer;
    attempts: number;
    challenge_jti: string | null;
  }>(
    `SELECT id, code_hash, attempts, challenge_jti FROM otp_codes
     WHERE tenant_id = $1 AND phone_key = $2 AND purpose = $3 AND consumed_at IS NULL AND expires_at > to_timestamp($4 / 1000.0)
     ORDER BY created_at DESC LIMIT 1 FOR UPDATE`,
    [t.tenantId, t.phoneKey, t.purpose, now],
  );
  const row = rows[0];
  if (!row) return false;
  if ((t.challengeJti ?? null) !== row.challenge_jti) return false;
  const attempts = row.attempts + 1;
  const ok = timingSafeEqual(codeHash(otpKey, row.id, code), row.code_hash);
  // The last allowed guess, right or wrong, ends the code.
  const consumed = ok || attempts >= otpMaxAttempts;
  await q.query(
    `UPDATE otp_codes SET attempts = $2, consumed_at = CASE WHEN $3 THEN to_timestamp($4 / 1000.0) ELSE NULL END WHERE id = $1`,
    [row.id, attempts, consumed, now],
  );
  return ok;
}
