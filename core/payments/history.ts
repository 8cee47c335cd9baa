/**
 * A customer's accounts and history (purpose customer.account.view): balances of their own
 * wallets, and transfers in and out with cursor pagination and filters, counterparties masked
 * per the edge's obligations (phone keeps its first 4 and last 2 characters).
 */
import { Type } from '@sinclair/typebox';
import { maskPhone, maskingLevel } from '../../shared/masking.ts';
import { cursorParam, cursorsOf, NextCursor } from '../http/cursor.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { getBalances } from '../ledger/accounts.ts';
import { accountsOwnedBy } from '../ledger/reads.ts';
import { knownCurrency } from '../ledger/commands.ts';
import { format, fromDb } from '../../shared/money.ts';
import { bearerHeader, customerOf, type PaymentsDeps } from './context.ts';
import { declared } from '../http/declared.ts';

const HistoryQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(cursorParam),
  from: Type.Optional(Type.String({ format: 'date-time' })),
  to: Type.Optional(Type.String({ format: 'date-time' })),
  direction: Type.Optional(Type.Union([Type.Literal('in'), Type.Literal('out')])),
  status: Type.Optional(
    Type.Union([
      Type.Literal('PENDING'),
      Type.Literal('POSTED'),
      Type.Literal('FAILED'),
      Type.Literal('EXPIRED'),
    ]),
  ),
});
const Item = Type.Object({
  id: Type.String(),
  direction: Type.String(),
  status: Type.String(),
  currency: Type.String(),
  amount: Type.String(),
  fee: Type.String(),
  counterparty: Type.Object({ phone: Type.String() }),
  reference: Type.String(),
  created_at: Type.String(),
  delegated: Type.Optional(
    Type.Object(
      {
        wallet_owner: Type.Object({ phone: Type.String() }),
        initiator: Type.Object({ phone: Type.String() }),
      },
      { description: "issue 20 item 3: a transfer a delegated payer made from the wallet owner's wallet" },
    ),
  ),
});

interface Row {
  id: string;
  payer_customer_id: string;
  initiator_customer_id: string;
  payee_customer_id: string;
  initiator_phone: string;
  status: string;
  expires_at: Date;
  currency: string;
  amount: string;
  fee: string;
  reference: string;
  created_at: Date;
  payer_phone: string;
  payee_phone: string;
}

/** One transfer as the customer `me` sees it: direction, status at `now`, counterparty shown per masking. */
function itemOf(r: Row, me: string, now: Date, shown: (phone: string) => string) {
  // Out of my wallet, or made by me from a wallet I pay for (issue 20 item 3); else in.
  const out = r.payer_customer_id === me || (r.initiator_customer_id === me && r.payee_customer_id !== me);
  const phone = out ? r.payee_phone : r.payer_phone;
  knownCurrency(r.currency);
  const delegated =
    r.initiator_customer_id !== r.payer_customer_id
      ? {
          delegated: {
            wallet_owner: { phone: shown(r.payer_phone) },
            initiator: { phone: shown(r.initiator_phone) },
          },
        }
      : {};
  return {
    id: r.id,
    direction: out ? 'out' : 'in',
    status: r.status === 'PENDING' && r.expires_at <= now ? 'EXPIRED' : r.status,
    currency: r.currency,
    amount: format(fromDb(r.amount)),
    fee: out ? format(fromDb(r.fee)) : '0.00',
    counterparty: { phone: shown(phone) },
    reference: r.reference,
    created_at: r.created_at.toISOString(),
    ...delegated,
  };
}

const tags = ['transfers'];

/** GET /v1/accounts. */
const myAccounts = (deps: PaymentsDeps) =>
  defineRoute({
    ...declared('GET', '/v1/accounts'),
    operationId: 'myAccounts',
    summary: "The customer's own accounts and balances",
    tags,
    headers: [bearerHeader],
    responses: {
      200: {
        description: 'Accounts',
        schema: Type.Object({ items: Type.Array(Type.Record(Type.String(), Type.Unknown())) }),
      },
    },
    handler: async (ctx) => {
      const caller = await customerOf(deps, ctx, 1);
      const rows = await accountsOwnedBy(deps.db, caller.tenantId, 'customer', caller.customerId);
      const { rows: me } = await deps.db.query<{ phone_e164: string }>(
        'SELECT phone_e164 FROM customers WHERE tenant_id = $1 AND id = $2',
        [caller.tenantId, caller.customerId],
      );
      const level = maskingLevel(ctx.headers['x-masking'], 'account');
      const phone = me[0]?.phone_e164 ?? '';
      const items = [];
      for (const a of rows) {
        const balances = await getBalances(deps.db, caller.tenantId, a.id);
        items.push({
          id: a.id,
          product_code: a.product_code,
          currency: a.currency,
          status: a.status,
          created_at: a.created_at.toISOString(),
          owner: { phone: level === 'full' ? phone : maskPhone(phone) },
          balances: balances ?? null,
        });
      }
      return { status: 200, body: { items } };
    },
  });

/** GET /v1/transactions. */
const myTransactions = (deps: PaymentsDeps) =>
  defineRoute({
    ...declared('GET', '/v1/transactions'),
    operationId: 'myTransactions',
    summary: 'Transfers in and out, newest first',
    tags,
    headers: [bearerHeader],
    query: HistoryQuery,
    responses: {
      200: {
        description: 'A page',
        schema: Type.Object({
          items: Type.Array(Item),
          next_cursor: NextCursor,
        }),
      },
    },
    handler: async (ctx) => {
      const caller = await customerOf(deps, ctx, 1);
      const q = ctx.query;
      const page = await cursorsOf(deps.db, deps.keys).open(
        ctx,
        `${caller.tenantId}/customer:${caller.customerId}`,
        2,
        20,
      );
      const after = page.after;
      const now = new Date(deps.now());
      const { rows } = await deps.db.query<Row>(
        `SELECT t.id, t.payer_customer_id, t.initiator_customer_id, t.payee_customer_id, t.status, t.expires_at, t.currency, t.amount, t.fee, t.reference, t.created_at,
                  pr.phone_e164 AS payer_phone, pe.phone_e164 AS payee_phone, pi.phone_e164 AS initiator_phone
             FROM transfers t
             JOIN customers pr ON pr.tenant_id = t.tenant_id AND pr.id = t.payer_customer_id
             JOIN customers pe ON pe.tenant_id = t.tenant_id AND pe.id = t.payee_customer_id
             JOIN customers pi ON pi.tenant_id = t.tenant_id AND pi.id = t.initiator_customer_id
            WHERE t.tenant_id = $1
              AND (t.payer_customer_id = $2 OR t.initiator_customer_id = $2 OR (t.payee_customer_id = $2 AND t.status = 'POSTED'))
              AND ($3::text IS NULL OR ($3 = 'out') = (t.payer_customer_id = $2 OR (t.initiator_customer_id = $2 AND t.payee_customer_id <> $2)))
              AND ($4::timestamptz IS NULL OR t.created_at >= $4) AND ($5::timestamptz IS NULL OR t.created_at < $5)
              AND ($6::text IS NULL OR (CASE WHEN t.status = 'PENDING' AND t.expires_at <= $7 THEN 'EXPIRED' ELSE t.status END) = $6)
              AND ($8::timestamptz IS NULL OR (t.created_at, t.id) < ($8::timestamptz, $9::uuid))
            ORDER BY t.created_at DESC, t.id DESC LIMIT $10`,
        [
          caller.tenantId,
          caller.customerId,
          q.direction ?? null,
          q.from ?? null,
          q.to ?? null,
          q.status ?? null,
          now,
          after?.[0] ?? null,
          after?.[1] ?? null,
          page.limit + 1,
        ],
      );
      const level = maskingLevel(ctx.headers['x-masking'], 'transaction');
      const { items: rowsOfPage, next_cursor } = page.finish(rows, (r) => [r.created_at.toISOString(), r.id]);
      const shown = (phone: string) => (level === 'full' ? phone : maskPhone(phone));
      const items = rowsOfPage.map((r) => itemOf(r, caller.customerId, now, shown));
      return { status: 200, body: { items, next_cursor } };
    },
  });

export function historyRoutes(deps: PaymentsDeps): RouteSpec[] {
  return [myAccounts(deps), myTransactions(deps)];
}
