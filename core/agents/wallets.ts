/**
 * /v1/wallets/* (SPEC 4.5 wallets group; issue 9 item 5). An agent reads its own float and
 * commission wallets freely. A customer's wallet only with the customer's consent in the same
 * operation: POST /v1/wallets/consent sends the customer a one-time code (5 min, HMAC-stored,
 * bound to this agent and this wallet); the agent passes it in `X-Customer-Code` on the one
 * read it authorises, which consumes it (wrong codes count; the 5th burns it). The consented
 * read is audited. Anything else (another agent's or a platform account) is 404.
 */
import { Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader } from '../idempotency/idempotency.ts';
import { Phone } from '../identity/schemas.ts';
import { checkOtp, issueOtp, otpTtlMs } from '../identity/otp.ts';
import { lookupKey, type TenantSecrets } from '../identity/secrets.ts';
import { fromDb } from '../../shared/money.ts';
import { balanceOf, balanceView, idempotent, wire } from './books.ts';
import { cursorParam, cursorsOf, withLegacyName, type PageRequest } from '../http/cursor.ts';
import { agentCaller, auditAgent, type AgentCaller, type AgentDeps, type AnyCtx } from './context.ts';
import { kycCustomer } from './txns.ts';
import { accountRef, entryHistory, type AccountRef } from '../ledger/reads.ts';
import { Uuid } from '../ledger/schemas.ts';
import { declared } from '../http/declared.ts';
import { walletOf } from '../ledger/wallets.ts';

const tags = ['agent-wallets'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };
const codeHeader = {
  name: 'X-Customer-Code',
  required: false,
  description:
    "A customer's wallet only: the one-time code from POST /v1/wallets/consent (consumed by this read)",
};
const WalletId = Type.Object({ wallet_id: Uuid });
const TxQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200 })),
    cursor: Type.Optional(cursorParam),
  },
  { additionalProperties: false },
);
const ConsentBody = Type.Object({ customerPhone: Phone }, { additionalProperties: false });
const BalanceBody = Type.Object({
  walletId: Type.String(),
  owner: Type.Object({ type: Type.String(), id: Type.String() }),
  productCode: Type.String(),
  currency: Type.String(),
  balance: Type.String(),
  held: Type.String(),
  available: Type.String(),
  consent: Type.Boolean(),
});

type WalletRow = AccountRef;

const bindingOf = (agentId: string, walletId: string) => `agent-wallet:${agentId}:${walletId}`;
const consentKey = (s: TenantSecrets, tenantId: string, customerId: string) =>
  lookupKey(s.lookup, 'agent-wallet-consent', tenantId, customerId);

async function secretsFor(deps: AgentDeps, tenantId: string): Promise<TenantSecrets> {
  const s = await deps.identity.secrets.get(tenantId);
  if (!s) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
  return s;
}

/**
 * The wallet if this agent may read it now. Own wallets: yes. A customer's: only with a valid
 * code; the code check commits on its own (a wrong guess must count even though we answer 401).
 */
async function visibleWallet(
  deps: AgentDeps,
  ctx: AnyCtx,
  c: AgentCaller,
  walletId: string,
): Promise<{ w: WalletRow; consent: boolean }> {
  const w = await accountRef(deps.db, c.tenantId, walletId);
  const notFound = new AppError('WALLET_NOT_FOUND', `wallet ${walletId} not found`);
  if (!w) throw notFound;
  if (w.owner_type === 'agent' && w.owner_id === c.agentId) return { w, consent: false };
  if (w.owner_type !== 'customer') throw notFound;
  const code = ctx.headers['x-customer-code'];
  if (!code)
    throw new AppError(
      'CUSTOMER_CONSENT_REQUIRED',
      "a customer's wallet needs the customer's one-time code (POST /v1/wallets/consent, then X-Customer-Code)",
    );
  const secrets = await secretsFor(deps, c.tenantId);
  const now = deps.now();
  const ok = await deps.db.tx(async (q) => {
    const good =
      /^[0-9]{4,8}$/.test(code) &&
      (await checkOtp(
        q,
        {
          tenantId: c.tenantId,
          phoneKey: consentKey(secrets, c.tenantId, w.owner_id),
          purpose: 'stepup',
          challengeJti: bindingOf(c.agentId, w.id),
        },
        code,
        secrets.otp,
        now,
      ));
    await auditAgent(
      q,
      {
        tenantId: c.tenantId,
        actor: { type: 'agent', id: c.agentId },
        action: 'agent.wallet.read',
        target: { type: 'wallet', id: w.id },
        attrs: { consent: good ? 'customer_code' : 'refused', path: ctx.path },
        requestId: ctx.requestId,
        allow: good,
      },
      now,
    );
    return good;
  });
  if (!ok) throw new AppError('CUSTOMER_CODE_INVALID', 'the customer code is wrong, expired or used');
  return { w, consent: true };
}

async function history(
  q: Queryable,
  tenantId: string,
  w: WalletRow,
  page: PageRequest,
): Promise<Record<string, unknown>> {
  const before = page.after?.[0];
  const rows = await entryHistory(
    q,
    tenantId,
    w.id,
    before === undefined ? undefined : String(before),
    page.limit + 1,
  );
  const { items, next_cursor } = page.finish(rows, (r) => [r.seq]);
  return withLegacyName({
    walletId: w.id,
    currency: w.currency,
    items: items.map((r) => ({
      postingId: r.posting_id,
      type: r.type_code,
      kind: r.kind,
      direction: r.side === 'credit' ? 'in' : 'out',
      amount: wire(fromDb(r.amount), w.currency),
      balanceAfter: wire(fromDb(r.balance_after), w.currency),
      description: r.description,
      createdAt: r.created_at.toISOString(),
    })),
    next_cursor,
  });
}

function agentWalletConsent(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/wallets/consent'),
    operationId: 'agentWalletConsent',
    tags,
    headers: [auth, idempotencyHeader],
    body: ConsentBody,
    summary:
      "Send the customer a one-time code that lets this agent read the customer's wallet once (balance or transactions)",
    responses: {
      202: {
        description: 'Code sent',
        schema: Type.Object({ walletId: Type.String(), expiresAt: Type.String() }),
      },
    },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const secrets = await secretsFor(deps, c.tenantId);
      return idempotent(deps, ctx, c, async (q) => {
        const now = deps.now();
        const { rows: ag } = await q.query<{ code: string; currency: string }>(
          'SELECT code, currency FROM agents WHERE tenant_id = $1 AND id = $2',
          [c.tenantId, c.agentId],
        );
        const agent = ag[0];
        if (!agent) throw new AppError('FORBIDDEN', 'agent is not active');
        const cust = await kycCustomer(q, c.tenantId, ctx.body.customerPhone, now);
        const walletId = await walletOf(q, c.tenantId, cust.id, agent.currency);
        if (!walletId)
          throw new AppError('WALLET_NOT_FOUND', 'the customer has no wallet in this currency yet');
        const code = await issueOtp(
          q,
          {
            tenantId: c.tenantId,
            phoneKey: consentKey(secrets, c.tenantId, cust.id),
            purpose: 'stepup',
            challengeJti: bindingOf(c.agentId, walletId),
          },
          secrets.otp,
          now,
        );
        await deps.identity.sms.send(
          q,
          {
            tenantId: c.tenantId,
            to: cust.phone,
            code,
            text: `Code ${code} lets agent ${agent.code} see your wallet balance and statement once. Share it only with the agent in front of you.`,
            purpose: 'agent-wallet-consent',
          },
          now,
        );
        await auditAgent(
          q,
          {
            tenantId: c.tenantId,
            actor: { type: 'agent', id: c.agentId },
            action: 'agent.wallet.consent_request',
            target: { type: 'wallet', id: walletId },
            requestId: ctx.requestId,
          },
          now,
        );
        return { status: 202, body: { walletId, expiresAt: new Date(now + otpTtlMs).toISOString() } };
      });
    },
  });
}

function agentWalletBalance(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/wallets/{wallet_id}/balance'),
    operationId: 'agentWalletBalance',
    tags,
    headers: [auth, codeHeader],
    params: WalletId,
    summary:
      "Balance of the agent's own float or commission wallet, or of a customer's wallet with the customer's code",
    responses: { 200: { description: 'Balance', schema: BalanceBody } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const { w, consent } = await visibleWallet(deps, ctx, c, ctx.params.wallet_id);
      const b = await balanceOf(deps.db, c.tenantId, w.id);
      return {
        status: 200,
        body: {
          walletId: w.id,
          owner: { type: w.owner_type, id: w.owner_id },
          productCode: w.product_code,
          currency: w.currency,
          ...balanceView(b, w.currency),
          consent,
        },
      };
    },
  });
}

function agentWalletTransactions(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/wallets/{wallet_id}/transactions'),
    operationId: 'agentWalletTransactions',
    tags,
    headers: [auth, codeHeader],
    params: WalletId,
    query: TxQuery,
    summary:
      'Entries of a wallet the agent may read (as for balance), newest first, with the running balance after each',
    responses: { 200: { description: 'Entries', schema: Type.Record(Type.String(), Type.Unknown()) } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const { w, consent } = await visibleWallet(deps, ctx, c, ctx.params.wallet_id);
      const b = await balanceOf(deps.db, c.tenantId, w.id);
      return {
        status: 200,
        body: {
          ...(await history(
            deps.db,
            c.tenantId,
            w,
            await cursorsOf(deps.db, deps.keys).open(ctx, `${c.tenantId}/agent:${c.agentId}`, 1),
          )),
          ...balanceView(b, w.currency),
          consent,
        },
      };
    },
  });
}

export function walletRoutes(deps: AgentDeps): RouteSpec[] {
  return [agentWalletConsent(deps), agentWalletBalance(deps), agentWalletTransactions(deps)];
}
