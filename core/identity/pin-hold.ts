/**
 * The hold after a PIN reset (issue 13 item 1). A SIM swap gives an attacker the victim's SMS,
 * hence a phone verification and a new PIN; a PIN change changes who can authorise money, so,
 * like a new device key, the new PIN waits out the tenant's cool-off (`device_cooloff_hours`,
 * reused on purpose: the same threat, the same time for the customer to read the SMS notice and
 * call) before it authorises money on any channel. Sign-in and reads (AAL 1) are not held.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';

export interface PinHold {
  /** When the PIN was reset. */
  since: Date;
  /** When the new PIN may authorise money again. */
  until: Date;
}

/** The customer's PIN-reset hold in force at `nowMs`; undefined when there is none. */
export async function pinResetHold(
  q: Queryable,
  tenantId: string,
  customerId: string,
  nowMs: number,
): Promise<PinHold | undefined> {
  const { rows } = await q.query<{ pin_set_at: Date; pin_reset_hold_until: Date }>(
    `SELECT pin_set_at, pin_reset_hold_until FROM credentials
      WHERE tenant_id = $1 AND customer_id = $2 AND pin_reset_hold_until > to_timestamp($3 / 1000.0)`,
    [tenantId, customerId, nowMs],
  );
  const r = rows[0];
  return r ? { since: r.pin_set_at, until: r.pin_reset_hold_until } : undefined;
}

/** "2026-03-01 08:00" (UTC), as the notice and refusals show a time. */
export const utcMinute = (d: Date): string => d.toISOString().slice(0, 16).replace('T', ' ');

/** 403 PIN_RESET_HOLD: the PIN was reset by phone verification and the hold has not ended. */
export function pinHeld(h: PinHold): AppError {
  return new AppError(
    'PIN_RESET_HOLD',
    `the PIN was reset recently; an SMS code cannot approve payments before ${h.until.toISOString()}`,
  );
}
