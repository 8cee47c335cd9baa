/** /v1/float/* (SPEC 4.5 float group) and the ops steps of float instructions (FLOAT.md). */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader } from '../idempotency/idempotency.ts';
import { Amount, Uuid } from '../ledger/schemas.ts';
import { balanceOf, balanceView, idempotent } from './books.ts';
import { agentCaller, opsCaller, type AgentDeps, type AnyCtx, type OpsCaller } from './context.ts';
import {
  cancelFloat,
  instructionView,
  listInstructions,
  loadInstruction,
  opsFloat,
  requestFloat,
} from './float.ts';
import { lockAgent } from './txns.ts';
import { declared } from '../http/declared.ts';

const tags = ['agent-float'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };
const opsAuth = {
  name: 'Authorization',
  required: true,
  description: 'Bearer <service token with role ops>',
};
const Id = Type.Object({ instruction_id: Uuid });
const Instruction = Type.Record(Type.String(), Type.Unknown(), {
  description:
    'Float instruction: id, kind, state, amount, currency, reference, postingId, holdId, history[]',
});
const RequestBody = Type.Object(
  {
    amount: Amount,
    reference: Type.Optional(
      Type.String({ maxLength: 64, description: 'e.g. the bank deposit slip number' }),
    ),
  },
  { additionalProperties: false },
);
const OpsBody = Type.Object(
  { reason: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })) },
  { additionalProperties: false },
);
const States = Type.Union([
  Type.Literal('PENDING'),
  Type.Literal('APPROVED'),
  Type.Literal('SETTLED'),
  Type.Literal('REJECTED'),
  Type.Literal('CANCELLED'),
]);
const ListQuery = Type.Object(
  {
    state: Type.Optional(States),
    agentId: Type.Optional(Uuid),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200 })),
  },
  { additionalProperties: false },
);
const FloatView = Type.Object({
  agentId: Type.String(),
  accountId: Type.String(),
  currency: Type.String(),
  balance: Type.String(),
  held: Type.String(),
  available: Type.String(),
  commissionAccountId: Type.String(),
  commissionBalance: Type.String(),
  instructions: Type.Array(Instruction),
});

function requireOps(ctx: AnyCtx): OpsCaller {
  const o = opsCaller(ctx);
  if (!o) throw new AppError('FORBIDDEN', 'ops role required');
  return o;
}

/** An agent's float request of one kind, in its idempotent frame. */
const request =
  (deps: AgentDeps, kind: 'TOPUP' | 'REDEEM') =>
  async (ctx: AnyCtx, body: { amount: string; reference?: string | undefined }) => {
    const c = await agentCaller(deps, ctx);
    return idempotent(deps, ctx, c, async (q) => ({
      status: 201,
      body: instructionView(await requestFloat(q, c, kind, body, ctx.requestId, deps.now())),
    }));
  };
/** One ops step on a float instruction: approve, settle or reject. */
const opsStep = (deps: AgentDeps, action: 'approve' | 'settle' | 'reject', summary: string) =>
  defineRoute({
    ...declared('POST', `/v1/ops/float/instructions/{instruction_id}/${action}`),
    operationId: `opsFloat${action[0]?.toUpperCase()}${action.slice(1)}`,
    tags,
    headers: [opsAuth, idempotencyHeader],
    params: Id,
    body: OpsBody,
    summary,
    responses: { 200: { description: 'The instruction after the step', schema: Instruction } },
    handler: async (ctx) => {
      const o = requireOps(ctx);
      return idempotent(deps, ctx, o, async (q) => ({
        status: 200,
        body: instructionView(
          await opsFloat(q, o, ctx.params.instruction_id, action, ctx.body.reason, ctx.requestId, deps.now()),
        ),
      }));
    },
  });

function agentFloat(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/float'),
    operationId: 'agentFloat',
    tags,
    headers: [auth],
    summary:
      "The calling agent's float (posted, held by pending redeems, available), commission wallet and latest instructions",
    responses: { 200: { description: 'Float', schema: FloatView } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const body = await deps.db.tx(async (q) => {
        const a = await lockAgent(q, c.tenantId, c.agentId);
        const fl = await balanceOf(q, c.tenantId, a.float_account_id);
        const cm = await balanceOf(q, c.tenantId, a.commission_account_id);
        const recent = await listInstructions(q, c.tenantId, { agentId: c.agentId, limit: 20 });
        return {
          agentId: c.agentId,
          accountId: a.float_account_id,
          currency: a.currency,
          ...balanceView(fl, a.currency),
          commissionAccountId: a.commission_account_id,
          commissionBalance: balanceView(cm, a.currency).balance,
          instructions: recent.map(instructionView),
        };
      });
      return { status: 200, body };
    },
  });
}

function agentFloatTopup(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/float/topup'),
    operationId: 'agentFloatTopup',
    tags,
    headers: [auth, idempotencyHeader],
    body: RequestBody,
    summary:
      'Ask for a float top-up (e.g. after a bank deposit): PENDING until ops approve and settle (settlement → float)',
    responses: { 201: { description: 'PENDING', schema: Instruction } },
    handler: (ctx) => request(deps, 'TOPUP')(ctx, ctx.body),
  });
}

function agentFloatRedeem(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/float/redeem'),
    operationId: 'agentFloatRedeem',
    tags,
    headers: [auth, idempotencyHeader],
    body: RequestBody,
    summary:
      'Ask to redeem float for cash at the bank: the amount is held on the float at once (422 INSUFFICIENT_FUNDS if not available)',
    responses: { 201: { description: 'PENDING', schema: Instruction } },
    handler: (ctx) => request(deps, 'REDEEM')(ctx, ctx.body),
  });
}

function agentFloatInstruction(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/float/instructions/{instruction_id}'),
    operationId: 'agentFloatInstruction',
    tags,
    headers: [auth],
    params: Id,
    summary: "One of the calling agent's float instructions with its history",
    responses: { 200: { description: 'Instruction', schema: Instruction } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      return {
        status: 200,
        body: instructionView(
          await loadInstruction(deps.db, c.tenantId, ctx.params.instruction_id, c.agentId),
        ),
      };
    },
  });
}

function agentFloatCancel(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/float/instructions/{instruction_id}/cancel'),
    operationId: 'agentFloatCancel',
    tags,
    headers: [auth, idempotencyHeader],
    params: Id,
    bodyKind: 'json',
    summary: 'The agent cancels its own PENDING instruction (a redeem hold is released)',
    responses: { 200: { description: 'CANCELLED', schema: Instruction } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      return idempotent(deps, ctx, c, async (q) => ({
        status: 200,
        body: instructionView(await cancelFloat(q, c, ctx.params.instruction_id, ctx.requestId, deps.now())),
      }));
    },
  });
}

function opsFloatInstructions(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/ops/float/instructions'),
    operationId: 'opsFloatInstructions',
    tags,
    headers: [opsAuth],
    query: ListQuery,
    summary: "Ops: the tenant's float instructions, newest first (filter by state, agent)",
    responses: {
      200: { description: 'Instructions', schema: Type.Object({ items: Type.Array(Instruction) }) },
    },
    handler: async (ctx) => {
      const o = requireOps(ctx);
      const rows = await listInstructions(deps.db, o.tenantId, {
        ...(ctx.query.agentId ? { agentId: ctx.query.agentId } : {}),
        ...(ctx.query.state ? { state: ctx.query.state } : {}),
        limit: ctx.query.limit ?? 50,
      });
      return { status: 200, body: { items: rows.map(instructionView) } };
    },
  });
}

export function floatRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    agentFloat(deps),
    agentFloatTopup(deps),
    agentFloatRedeem(deps),
    agentFloatInstruction(deps),
    agentFloatCancel(deps),
    opsFloatInstructions(deps),
    opsStep(deps, 'approve', 'Ops approve a PENDING instruction'),
    opsStep(
      deps,
      'settle',
      'Ops settle an APPROVED instruction through the ledger against the tenant settlement account (refused on a closed business day)',
    ),
    opsStep(deps, 'reject', 'Ops reject a PENDING or APPROVED instruction (a redeem hold is released)'),
  ];
}
