/**
 * Housekeeping: deletes rows that can no longer change any answer, so tables written on every
 * request (replay values, lockout counters, one-time codes) do not grow without bound.
 *
 * Each rule names the table and the condition under which a row is inert:
 * - edge_replay, used_challenges: five minutes past expires_at (clock skew between the
 *   application and the database), the value is refused for its age anyway (the edge's insert
 *   reopens an expired value; a challenge past expiry fails verification).
 * - stepup_uses: five minutes past expires_at, the expiry of the AAL 2 token that held the
 *   step-up: an expired token is refused before its grant is ever looked at.
 * - otp_codes, phone_verifications: a day past expiry (never accepted again; the day keeps
 *   them for support questions about the last attempts).
 * - refresh_tokens: a week past expiry (a rotated token presented later is refused as expired
 *   either way; the week keeps reuse forensics).
 * - auth_throttle: the window (at most a day, identity/throttle.ts) has passed, no lock is
 *   running and no OTP re-verification is pending: the next attempt would reset the row to
 *   exactly what a missing row gives. For address counters (identity/address-throttle.ts) that
 *   includes their delay progression: windows of at most 6 h and delays of at most 12 h
 *   (identity/settings.ts) mean a day without a failure has forgiven it.
 * - idempotency_keys: a retention, not inertness (issue 13 item 3): a key is remembered for
 *   7 days after its first use, then the same key starts a new request. Stripe keeps keys 24
 *   hours; a week also covers a client whose retry queue is stuck over a weekend, so a late
 *   retry of a posting or transfer does not move money twice. Sealed secrets go with the row.
 * - admin_rate_counters: the one-minute window ended minutes ago (admin/rate-limit.ts counts
 *   only the current window; the margin covers clock skew between instances).
 * - webauthn_challenges: five minutes past expiry (a passkey ceremony never finishes later).
 * Deletes run in batches (ctid lists) so no statement holds many row locks or runs long.
 *
 * Several core instances (issue 23 item 6): the timer runs on each, but one prunes at a time
 * (../db/exclusive.ts); pruneOnce itself is also safe run concurrently: the outer DELETE
 * repeats the inert condition, so a row changed since the ctid list was read (which PostgreSQL
 * rechecks after waiting for its lock) is kept, and a row another run deleted is not counted.
 */
import type { Logger } from 'pino';
import { ExclusiveTimer } from '../db/exclusive.ts';
import type { Db } from '../../shared/db/pool.ts';

export interface PruneRule {
  table: string;
  /** SQL condition on the table's rows; uses an index (migration 0220 or the table's own). */
  inert: string;
}

/** How long an Idempotency-Key is remembered (README "Idempotency"); index idempotency_keys_created_idx. */
export const idempotencyRetention = '7 days';

export const pruneRules: readonly PruneRule[] = Object.freeze([
  // Five minutes past expiry: the checks use the application's clock, this uses the database's.
  { table: 'edge_replay', inert: "expires_at < now() - interval '5 minutes'" },
  { table: 'used_challenges', inert: "expires_at < now() - interval '5 minutes'" },
  { table: 'stepup_uses', inert: "expires_at < now() - interval '5 minutes'" },
  { table: 'otp_codes', inert: "expires_at < now() - interval '1 day'" },
  { table: 'phone_verifications', inert: "expires_at < now() - interval '1 day'" },
  { table: 'refresh_tokens', inert: "expires_at < now() - interval '7 days'" },
  {
    table: 'auth_throttle',
    inert:
      "window_start < now() - interval '1 day' AND NOT needs_otp AND (locked_until IS NULL OR locked_until < now())",
  },
  { table: 'idempotency_keys', inert: `created_at < now() - interval '${idempotencyRetention}'` },
  { table: 'admin_rate_counters', inert: "window_start < now() - interval '5 minutes'" },
  // Federated sign-ins in progress (migration 0821): 10 minutes to finish, then nothing.
  { table: 'staff_federation_states', inert: "expires_at < now() - interval '5 minutes'" },
  { table: 'webauthn_challenges', inert: "expires_at < now() - interval '5 minutes'" },
]);

/** Delete every inert row, `batch` at a time; returns the count per table. */
export async function pruneOnce(db: Db, batch = 5000): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const rule of pruneRules) {
    let total = 0;
    for (;;) {
      const { rowCount } = await db.query(
        `DELETE FROM ${rule.table} WHERE ctid = ANY (ARRAY(SELECT ctid FROM ${rule.table} WHERE ${rule.inert} LIMIT $1)) AND ${rule.inert}`,
        [batch],
      );
      total += rowCount ?? 0;
      if ((rowCount ?? 0) < batch) break;
    }
    counts[rule.table] = total;
  }
  return counts;
}

export const pruneEveryMs = 5 * 60_000;

/** Runs pruneOnce on a timer; a failed run is logged and retried at the next tick. */
export class Housekeeper extends ExclusiveTimer<Record<string, number>> {
  constructor(db: Db, log: Logger, everyMs = pruneEveryMs) {
    super(db, 'housekeeping', everyMs, () => pruneOnce(db), {
      done: (counts) => {
        const deleted = Object.values(counts).reduce((a, b) => a + b, 0);
        if (deleted > 0) log.info({ deleted: counts }, 'housekeeping pruned inert rows');
      },
      failed: (err) => log.warn({ err: err.message }, 'housekeeping failed; will retry'),
    });
  }
}
