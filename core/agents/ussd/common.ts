/** Shared steps of the USSD menus: the final step run once per session, amounts, wallets. */
import type { Queryable, TxClient } from '../../../shared/db/pool.ts';
import { AppError, isErrorCode } from '../../../shared/errors.ts';
import { principalOf, requestHash, withIdempotency } from '../../idempotency/idempotency.ts';
import type { AgentDeps, AnyCtx } from '../context.ts';
import { displayDecimals, minorUnitsOf } from '../../ledger/currency.ts';
import { walletOf } from '../../ledger/wallets.ts';
import { format, parseAmount, type Micro } from '../../../shared/money.ts';
import { end, messageOf, sessionKey, type UssdRequest } from './protocol.ts';

/**
 * Run the money step of a session once: a gateway retrying the same final request gets the
 * first answer. The key and hash leave out the last answer (the PIN): nothing stored lets
 * anyone recover a PIN from a session id. The key is the calling gateway's (issue 13 item 3).
 */
export async function once(
  deps: AgentDeps,
  ctx: AnyCtx,
  tenantId: string,
  route: string,
  form: UssdRequest,
  fn: (q: TxClient) => Promise<string>,
): Promise<string> {
  const answers = (form.text ?? '').split('*');
  const withoutPin = answers.slice(0, -1).join('*');
  const stored = await withIdempotency(
    deps,
    {
      tenantId,
      principal: principalOf('service', ctx.identity.principalId),
      key: sessionKey(tenantId, route, form.sessionId, withoutPin),
      method: 'POST',
      path: route,
      requestHash: requestHash('POST', route, {
        sessionId: form.sessionId,
        phoneNumber: form.phoneNumber,
        answers: withoutPin,
      }),
    },
    async (q) => ({ status: 200, body: { text: await fn(q) } }),
  );
  const body: unknown = JSON.parse(stored.body);
  if (
    stored.status === 200 &&
    typeof body === 'object' &&
    body !== null &&
    typeof (body as { text?: unknown }).text === 'string'
  )
    return (body as { text: string }).text;
  const code = typeof body === 'object' && body !== null ? (body as { code?: unknown }).code : undefined;
  return end(
    typeof code === 'string' && isErrorCode(code)
      ? messageOf(new AppError(code))
      : 'Request refused. Please try again later.',
  );
}

/** A positive amount typed on a keypad, in the currency's minor units; undefined when it is not one. */
export function amountTyped(input: string, currency: string): Micro | undefined {
  const minorUnits = minorUnitsOf(currency);
  if (minorUnits === undefined) return undefined;
  const p = parseAmount(input, { minorUnits });
  return p.ok && p.micro > 0n ? p.micro : undefined;
}

export const money = (m: Micro, currency: string): string =>
  `${currency} ${format(m, displayDecimals(currency))}`;

/** A customer's main wallet in the tenant's base currency, without opening one. */
export async function customerWallet(
  q: Queryable,
  tenantId: string,
  customerId: string,
): Promise<{ id: string; currency: string } | undefined> {
  const currency = await baseCurrency(q, tenantId);
  const id = await walletOf(q, tenantId, customerId, currency);
  return id ? { id, currency } : undefined;
}

export async function baseCurrency(q: Queryable, tenantId: string): Promise<string> {
  const { rows } = await q.query<{ c: string }>('SELECT base_currency AS c FROM tenants WHERE id = $1', [
    tenantId,
  ]);
  return rows[0]?.c ?? 'KES';
}
