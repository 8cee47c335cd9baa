/**
 * The calling agent's own profile, outlet and capabilities (SPEC 4.5 agent group; issue 9
 * item 2). Reads work for a suspended agent too (the app must be able to say why nothing is
 * allowed); PATCH needs an active agent.
 */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { agentCaller, agentSession, auditAgent, type AgentDeps, type AnyCtx } from './context.ts';
import { capabilitiesOf, capabilitiesView, loadAgent, type AgentProfileRow } from './capabilities.ts';
import { declared } from '../http/declared.ts';

const tags = ['agent'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };

const Me = Type.Object({
  id: Type.String(),
  code: Type.String(),
  name: Type.String(),
  displayName: Type.Union([Type.String(), Type.Null()]),
  phone: Type.String(),
  status: Type.String(),
  tier: Type.String(),
  language: Type.String(),
  currency: Type.String(),
  outletId: Type.String(),
  floatAccountId: Type.String(),
  commissionAccountId: Type.String(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const PatchMe = Type.Object(
  {
    displayName: Type.Optional(
      Type.Union([
        Type.String({ minLength: 1, maxLength: 60, pattern: '^[^\\u0000-\\u001f]+$' }),
        Type.Null(),
      ]),
    ),
    language: Type.Optional(
      Type.String({ pattern: '^[a-z]{2}(-[A-Z]{2})?$', description: 'BCP 47 language, e.g. en, sw, fr-CD' }),
    ),
  },
  { additionalProperties: false, minProperties: 1 },
);
const Outlet = Type.Object({
  id: Type.String(),
  name: Type.String(),
  region: Type.String(),
  address: Type.String(),
  createdAt: Type.String(),
});
const Reason = Type.Object({
  code: Type.String(),
  message: Type.String(),
  course: Type.Optional(Type.String()),
});
const Capabilities = Type.Object({
  agentId: Type.String(),
  status: Type.String(),
  tier: Type.String(),
  float: Type.Object({ currency: Type.String(), available: Type.String() }),
  trainingPassed: Type.Array(Type.String()),
  capabilities: Type.Array(
    Type.Object({ name: Type.String(), allowed: Type.Boolean(), reasons: Type.Array(Reason) }),
  ),
});

/**
 * Like agentCaller (context.ts) — valid token, live agent session, agreement with the edge's
 * identity headers — but a suspended agent may still read its own profile.
 */
export async function agentReader(
  deps: AgentDeps,
  ctx: AnyCtx,
): Promise<{ tenantId: string; agent: AgentProfileRow }> {
  const session = await agentSession(deps, ctx);
  const agent = await loadAgent(deps.db, session.tenantId, session.agentId);
  if (!agent) throw new AppError('session_revoked', 'session is revoked or unknown');
  return { tenantId: session.tenantId, agent };
}

export function meView(a: AgentProfileRow): Record<string, unknown> {
  return {
    id: a.id,
    code: a.code,
    name: a.name,
    displayName: a.display_name,
    phone: a.phone_e164,
    status: a.status,
    tier: a.tier,
    language: a.language,
    currency: a.currency,
    outletId: a.outlet_id,
    floatAccountId: a.float_account_id,
    commissionAccountId: a.commission_account_id,
    createdAt: a.created_at.toISOString(),
    updatedAt: a.updated_at.toISOString(),
  };
}

function agentMe(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/agent/me'),
    operationId: 'agentMe',
    tags,
    headers: [auth],
    summary: "The calling agent's profile (also when suspended)",
    responses: { 200: { description: 'Profile', schema: Me } },
    handler: async (ctx) => ({ status: 200, body: meView((await agentReader(deps, ctx)).agent) }),
  });
}

function agentMeUpdate(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('PATCH', '/v1/agent/me'),
    operationId: 'agentMeUpdate',
    tags,
    headers: [auth],
    body: PatchMe,
    summary: "Change the agent's display name or language (audited); identity fields are ops-managed",
    responses: { 200: { description: 'Updated profile', schema: Me } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      const t = deps.now();
      const b = ctx.body;
      await deps.db.tx(async (q) => {
        await q.query(
          `UPDATE agents SET display_name = CASE WHEN $3 THEN $4 ELSE display_name END, language = coalesce($5, language), updated_at = to_timestamp($6 / 1000.0)
              WHERE tenant_id = $1 AND id = $2`,
          [c.tenantId, c.agentId, b.displayName !== undefined, b.displayName ?? null, b.language ?? null, t],
        );
        await auditAgent(
          q,
          {
            tenantId: c.tenantId,
            actor: { type: 'agent', id: c.agentId },
            action: 'agent.profile.update',
            target: { type: 'agent', id: c.agentId },
            attrs: { fields: Object.keys(b) },
            requestId: ctx.requestId,
          },
          t,
        );
      });
      const a = await loadAgent(deps.db, c.tenantId, c.agentId);
      if (!a) throw new AppError('NOT_FOUND', 'agent not found');
      return { status: 200, body: meView(a) };
    },
  });
}

function agentOutlet(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/agent/outlet'),
    operationId: 'agentOutlet',
    tags,
    headers: [auth],
    summary: "The calling agent's outlet",
    responses: { 200: { description: 'Outlet', schema: Outlet } },
    handler: async (ctx) => {
      const { tenantId, agent } = await agentReader(deps, ctx);
      const { rows } = await deps.db.query<{
        id: string;
        name: string;
        region: string;
        address: string;
        created_at: Date;
      }>('SELECT id, name, region, address, created_at FROM agent_outlets WHERE tenant_id = $1 AND id = $2', [
        tenantId,
        agent.outlet_id,
      ]);
      const o = rows[0];
      if (!o) throw new AppError('NOT_FOUND', 'outlet not found');
      return {
        status: 200,
        body: {
          id: o.id,
          name: o.name,
          region: o.region,
          address: o.address,
          createdAt: o.created_at.toISOString(),
        },
      };
    },
  });
}

function agentCapabilities(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/agent/capabilities'),
    operationId: 'agentCapabilities',
    tags,
    headers: [auth],
    summary:
      'What the agent may do right now (from status, tier, training passed and float), and for each refusal why',
    responses: { 200: { description: 'Capabilities', schema: Capabilities } },
    handler: async (ctx) => {
      const { tenantId, agent } = await agentReader(deps, ctx);
      return { status: 200, body: capabilitiesView(agent, await capabilitiesOf(deps.db, tenantId, agent)) };
    },
  });
}

export function profileRoutes(deps: AgentDeps): RouteSpec[] {
  return [agentMe(deps), agentMeUpdate(deps), agentOutlet(deps), agentCapabilities(deps)];
}
