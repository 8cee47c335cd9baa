/** /v1/agents/{agent_id}/commissions* (SPEC 4.5 commissions group; commissions.ts). */
import { Type } from '@sinclair/typebox';
import { cursorParam, cursorsOf, LegacyNextCursor, NextCursor } from '../http/cursor.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader } from '../idempotency/idempotency.ts';
import { idempotent } from './books.ts';
import { acceptPayout, listCommissions, ownAgent, previewPayout } from './commissions.ts';
import { agentCaller, type AgentDeps } from './context.ts';
import { Uuid } from '../ledger/schemas.ts';
import { declared } from '../http/declared.ts';

const tags = ['agent-commissions'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };
const AgentId = Type.Object({ agent_id: Uuid });
const Payout = Type.Record(Type.String(), Type.Unknown(), {
  description:
    'Payout: payoutId, state (PREVIEWED, ACCEPTED, STALE), amount, currency, postingId, expiresAt, entries[]',
});
const ListQuery = Type.Object(
  {
    state: Type.Optional(
      Type.Union([Type.Literal('ACCRUED'), Type.Literal('PAID'), Type.Literal('CLAWED_BACK')]),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200 })),
    cursor: Type.Optional(cursorParam),
  },
  { additionalProperties: false },
);
const AcceptBody = Type.Object({ payoutId: Uuid }, { additionalProperties: false });

export function commissionRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('GET', '/v1/agents/{agent_id}/commissions'),
      operationId: 'agentCommissions',
      tags,
      headers: [auth],
      params: AgentId,
      query: ListQuery,
      summary:
        'Commission entries of the calling agent (accruals +, clawbacks −), newest first, with totals by state',
      responses: {
        200: {
          description: 'Entries',
          schema: Type.Object({
            items: Type.Array(Type.Record(Type.String(), Type.Unknown())),
            totals: Type.Record(Type.String(), Type.String()),
            next_cursor: NextCursor,
            nextCursor: LegacyNextCursor,
          }),
        },
      },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        ownAgent(c, ctx.params.agent_id);
        return {
          status: 200,
          body: await listCommissions(
            deps.db,
            c,
            ctx.query.state,
            await cursorsOf(deps.db, deps.keys).open(ctx, `${c.tenantId}/agent:${c.agentId}`, 1),
          ),
        };
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/agents/{agent_id}/commissions/payouts/preview'),
      operationId: 'agentCommissionPreview',
      tags,
      headers: [auth, idempotencyHeader],
      params: AgentId,
      bodyKind: 'json',
      summary:
        'What a payout would pay now and from which accrual entries (valid 15 minutes; 422 NOTHING_TO_PAY)',
      responses: { 201: { description: 'PREVIEWED', schema: Payout } },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        ownAgent(c, ctx.params.agent_id);
        return idempotent(deps, ctx, c, async (q) => ({
          status: 201,
          body: await previewPayout(q, c, ctx.requestId, deps.now()),
        }));
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/agents/{agent_id}/commissions/payouts/accept'),
      operationId: 'agentCommissionAccept',
      tags,
      headers: [auth, idempotencyHeader],
      params: AgentId,
      body: AcceptBody,
      summary:
        'Pay a preview into the float in one posting; a preview pays once (409 PAYOUT_ALREADY_ACCEPTED, 409 PAYOUT_STALE)',
      responses: { 200: { description: 'ACCEPTED', schema: Payout } },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        ownAgent(c, ctx.params.agent_id);
        return idempotent(deps, ctx, c, async (q) => ({
          status: 200,
          body: await acceptPayout(q, c, ctx.body.payoutId, ctx.requestId, deps.now()),
        }));
      },
    }),
  ];
}
