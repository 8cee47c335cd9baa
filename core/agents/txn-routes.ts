/** /v1/txns/* (SPEC 4.5 transactions group): cash-in, cash-out, assisted P2P, authorise, read, reverse. */
import { Type } from '@sinclair/typebox';
import { AppError, toCoreBody } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader } from '../idempotency/idempotency.ts';
import { Phone } from '../identity/schemas.ts';
import { Amount, Uuid } from '../ledger/schemas.ts';
import {
  agentCaller,
  opsCaller,
  type AgentCaller,
  type AgentDeps,
  type AnyCtx,
  type OpsCaller,
} from './context.ts';
import { idempotent } from './books.ts';
import { authorizeTxn, loadTxn, reverseTxn, startTxn, txnView } from './txns.ts';
import { declared } from '../http/declared.ts';

const tags = ['agent-txns'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };
const writeHeaders = [auth, idempotencyHeader];
const TxnId = Type.Object({ txn_id: Uuid });
const Txn = Type.Record(Type.String(), Type.Unknown(), { description: 'Agent transaction (STATES.md)' });
const CashBody = Type.Object(
  { customerPhone: Phone, amount: Amount, reference: Type.Optional(Type.String({ maxLength: 64 })) },
  { additionalProperties: false },
);
const P2pBody = Type.Object(
  {
    customerPhone: Phone,
    recipientPhone: Phone,
    amount: Amount,
    reference: Type.Optional(Type.String({ maxLength: 64 })),
  },
  { additionalProperties: false },
);
const AuthorizeBody = Type.Object(
  { customerCode: Type.String({ pattern: '^[0-9]{4,8}$' }) },
  { additionalProperties: false },
);

async function secretsFor(deps: AgentDeps, tenantId: string) {
  const s = await deps.identity.secrets.get(tenantId);
  if (!s) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
  return s;
}

/** An agent transaction of one kind started in its idempotent frame. */
const start =
  (deps: AgentDeps, kind: 'CASHIN' | 'CASHOUT' | 'P2P') =>
  async (
    ctx: AnyCtx,
    input: {
      customerPhone: string;
      amount: string;
      counterpartyPhone?: string;
      reference?: string | undefined;
    },
  ) => {
    const c = await agentCaller(deps, ctx);
    const secrets = await secretsFor(deps, c.tenantId);
    return idempotent(deps, ctx, c, async (q) => {
      const r = await startTxn(deps, q, c, kind, input, ctx.requestId, secrets);
      return { status: r.state === 'POSTED' ? 201 : 202, body: txnView(r) };
    });
  };
/** A reversal in its idempotent frame, by the caller `who` resolves (the agent or ops). */
const reverse =
  (deps: AgentDeps, who: (ctx: AnyCtx) => Promise<AgentCaller | OpsCaller>) =>
  async (ctx: AnyCtx, txnId: string) => {
    const c = await who(ctx);
    return idempotent(deps, ctx, c, async (q) => ({
      status: 200,
      body: txnView(await reverseTxn(deps, q, c, txnId, ctx.requestId)),
    }));
  };

function agentCashIn(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/txns/cashin'),
    operationId: 'agentCashIn',
    tags,
    headers: writeHeaders,
    body: CashBody,
    summary: 'Cash-in: agent float → customer wallet, posted at once; commission accrued',
    responses: { 201: { description: 'POSTED', schema: Txn } },
    handler: (ctx) => start(deps, 'CASHIN')(ctx, ctx.body),
  });
}

function agentCashOut(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/txns/cashout'),
    operationId: 'agentCashOut',
    tags,
    headers: writeHeaders,
    body: CashBody,
    summary:
      'Cash-out: sends the customer a one-time code; AWAITING_CUSTOMER until the agent enters it (POST /v1/txns/{txn_id}/authorize)',
    responses: { 202: { description: 'AWAITING_CUSTOMER', schema: Txn } },
    handler: (ctx) => start(deps, 'CASHOUT')(ctx, ctx.body),
  });
}

function agentP2pAssist(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/txns/p2p/assist'),
    operationId: 'agentP2pAssist',
    tags,
    headers: writeHeaders,
    body: P2pBody,
    summary: 'Assisted P2P: customer wallet → another customer; the sender authorises with a one-time code',
    responses: { 202: { description: 'AWAITING_CUSTOMER', schema: Txn } },
    handler: (ctx) => start(deps, 'P2P')(ctx, { ...ctx.body, counterpartyPhone: ctx.body.recipientPhone }),
  });
}

function agentTxnAuthorize(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/txns/{txn_id}/authorize'),
    operationId: 'agentTxnAuthorize',
    tags,
    headers: writeHeaders,
    params: TxnId,
    body: AuthorizeBody,
    summary:
      "Enter the customer's one-time code: posts the cash-out or P2P (wrong codes count; the 5th fails it)",
    responses: { 200: { description: 'POSTED', schema: Txn } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const secrets = await secretsFor(deps, c.tenantId);
      return idempotent(deps, ctx, c, async (q) => {
        const r = await authorizeTxn(
          deps,
          q,
          c,
          ctx.params.txn_id,
          ctx.body.customerCode,
          ctx.requestId,
          secrets,
        );
        // A refused code is committed (the attempt counts), so it is answered, not thrown.
        return r.ok
          ? { status: 200, body: txnView(r.txn) }
          : { status: r.error.status, body: toCoreBody(r.error) };
      });
    },
  });
}

function agentTxnGet(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/txns/{txn_id}'),
    operationId: 'agentTxnGet',
    tags,
    headers: [auth],
    params: TxnId,
    summary: "One of the calling agent's transactions",
    responses: { 200: { description: 'Transaction', schema: Txn } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const r = await loadTxn(deps.db, c.tenantId, ctx.params.txn_id);
      if (r.agent_id !== c.agentId)
        throw new AppError('TXN_NOT_FOUND', `transaction ${ctx.params.txn_id} not found`);
      return { status: 200, body: txnView(r) };
    },
  });
}

function agentTxnReverse(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/txns/{txn_id}/reverse'),
    operationId: 'agentTxnReverse',
    tags,
    headers: writeHeaders,
    params: TxnId,
    bodyKind: 'json',
    summary:
      'Reverse a POSTED transaction within the window (originating agent): linked reversing posting, commission clawed back',
    responses: { 200: { description: 'REVERSED', schema: Txn } },
    handler: (ctx) => reverse(deps, (x) => agentCaller(deps, x))(ctx, ctx.params.txn_id),
  });
}

function opsAgentTxnReverse(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/ops/txns/{txn_id}/reverse'),
    operationId: 'opsAgentTxnReverse',
    tags,
    params: TxnId,
    bodyKind: 'json',
    headers: [
      { name: 'Authorization', required: true, description: 'Bearer <service token with role ops>' },
      idempotencyHeader,
    ],
    summary: 'Ops reverses any agent transaction of the tenant within the window',
    responses: { 200: { description: 'REVERSED', schema: Txn } },
    handler: (ctx) =>
      reverse(deps, async (x) => {
        const o = opsCaller(x);
        if (!o) throw new AppError('FORBIDDEN', 'ops role required');
        return o;
      })(ctx, ctx.params.txn_id),
  });
}

export function txnRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    agentCashIn(deps),
    agentCashOut(deps),
    agentP2pAssist(deps),
    agentTxnAuthorize(deps),
    agentTxnGet(deps),
    agentTxnReverse(deps),
    opsAgentTxnReverse(deps),
  ];
}
