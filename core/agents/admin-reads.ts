/**
 * A tenant's agents and outlets as its Admins and ops staff read them (issue 20 item 1; the
 * writes are ./admin-routes.ts): lists with the administration cursor (core/admin/paging.ts,
 * ordered by id) and single reads. Every query is scoped to the caller's tenant, so another
 * tenant's id is a 404 like an id that does not exist. No credential is ever shown here.
 */
import { Type } from '@sinclair/typebox';
import type { QueryResultRow } from 'pg';
import { AppError } from '../../shared/errors.ts';
import { format, fromDb } from '../../shared/money.ts';
import { adminRoute, type AdminDeps } from '../admin/http.ts';
import { declared } from '../http/declared.ts';
import { CurrencyCode, Nullable, Page, Timestamp, Uuid, pageQuery } from '../admin/schemas.ts';
import type { RouteSpec } from '../http/route.ts';
import { Outlet, Tier, outletView, type OutletRow } from './admin-routes.ts';

const AgentView = Type.Object({
  id: Uuid,
  code: Type.String(),
  phone: Type.String(),
  name: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('suspended')]),
  tier: Tier,
  outletId: Uuid,
  currency: CurrencyCode,
  floatAccountId: Uuid,
  commissionAccountId: Uuid,
  txn_max_amount: Nullable(Type.String()),
  day_max_amount: Nullable(Type.String()),
  created_at: Timestamp,
});

interface AgentRow {
  id: string;
  code: string;
  phone_e164: string;
  name: string;
  status: 'active' | 'suspended';
  tier: 'basic' | 'standard' | 'super';
  outlet_id: string;
  currency: string;
  float_account_id: string;
  commission_account_id: string;
  txn_max_amount: string | null;
  day_max_amount: string | null;
  created_at: Date;
}
const agentCols = `id, code, phone_e164, name, status, tier, outlet_id, currency, float_account_id,
  commission_account_id, txn_max_amount::text, day_max_amount::text, created_at`;
const limitView = (v: string | null) => (v === null ? null : format(fromDb(v)));
const agentView = (a: AgentRow) => ({
  id: a.id,
  code: a.code,
  phone: a.phone_e164,
  name: a.name,
  status: a.status,
  tier: a.tier,
  outletId: a.outlet_id,
  currency: a.currency,
  floatAccountId: a.float_account_id,
  commissionAccountId: a.commission_account_id,
  txn_max_amount: limitView(a.txn_max_amount),
  day_max_amount: limitView(a.day_max_amount),
  created_at: a.created_at.toISOString(),
});
const outletCols = 'id, name, region, address, created_at';
const IdParams = Type.Object({ id: Uuid });

/** One row of the caller's tenant by id: another tenant's id is as unknown as none (404 `code`). */
function readOne<R extends QueryResultRow>(
  deps: AdminDeps,
  select: string,
  code: 'OUTLET_NOT_FOUND' | 'AGENT_NOT_FOUND',
  view: (row: R) => unknown,
) {
  return async (ctx: { params: { id: string } }, caller: { tenantId: string }) => {
    const { rows } = await deps.db.query<R>(`${select} WHERE tenant_id = $1 AND id = $2`, [
      caller.tenantId,
      ctx.params.id,
    ]);
    const row = rows[0];
    if (!row)
      throw new AppError(code, `no ${code === 'AGENT_NOT_FOUND' ? 'agent' : 'outlet'} ${ctx.params.id}`);
    return { status: 200, body: view(row) };
  };
}

export function agentReadRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.agents'];
  const read = { tags, mode: 'read' as const };
  return [
    adminRoute(deps, {
      ...read,
      ...declared('GET', '/v1/outlets'),
      operationId: 'listOutlets',
      summary: "The tenant's agent outlets, optionally of one region (cursor)",
      query: Type.Object({
        ...pageQuery,
        region: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
      }),
      responses: { 200: { description: '{items, next_cursor}', schema: Page(Outlet) } },
      read: async (ctx, caller) => {
        const page = await deps.pages.open(ctx, caller.tenantId, 1);
        const { rows } = await deps.db.query<OutletRow>(
          `SELECT ${outletCols} FROM agent_outlets WHERE tenant_id = $1 AND ($2::text IS NULL OR region = $2)
             AND ($3::uuid IS NULL OR id > $3::uuid) ORDER BY id LIMIT $4`,
          [caller.tenantId, ctx.query.region ?? null, page.after?.[0] ?? null, page.limit + 1],
        );
        const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
        return { status: 200, body: { items: items.map(outletView), next_cursor } };
      },
    }),
    adminRoute(deps, {
      ...read,
      ...declared('GET', '/v1/outlets/{id}'),
      operationId: 'getOutlet',
      summary: 'One outlet of the tenant',
      params: IdParams,
      responses: { 200: { description: 'The outlet', schema: Outlet } },
      read: readOne<OutletRow>(
        deps,
        `SELECT ${outletCols} FROM agent_outlets`,
        'OUTLET_NOT_FOUND',
        outletView,
      ),
    }),
    adminRoute(deps, {
      ...read,
      ...declared('GET', '/v1/agents'),
      operationId: 'listAgents',
      summary: "The tenant's agents, optionally of one outlet or status (cursor); never their credentials",
      query: Type.Object({
        ...pageQuery,
        outletId: Type.Optional(Uuid),
        status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('suspended')])),
      }),
      responses: { 200: { description: '{items, next_cursor}', schema: Page(AgentView) } },
      read: async (ctx, caller) => {
        const page = await deps.pages.open(ctx, caller.tenantId, 1);
        const { rows } = await deps.db.query<AgentRow>(
          `SELECT ${agentCols} FROM agents WHERE tenant_id = $1 AND ($2::uuid IS NULL OR outlet_id = $2::uuid)
             AND ($3::text IS NULL OR status = $3) AND ($4::uuid IS NULL OR id > $4::uuid) ORDER BY id LIMIT $5`,
          [
            caller.tenantId,
            ctx.query.outletId ?? null,
            ctx.query.status ?? null,
            page.after?.[0] ?? null,
            page.limit + 1,
          ],
        );
        const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
        return { status: 200, body: { items: items.map(agentView), next_cursor } };
      },
    }),
    adminRoute(deps, {
      ...read,
      ...declared('GET', '/v1/agents/{id}'),
      operationId: 'getAgent',
      summary: 'One agent of the tenant; never its credentials',
      params: IdParams,
      responses: { 200: { description: 'The agent', schema: AgentView } },
      read: readOne<AgentRow>(deps, `SELECT ${agentCols} FROM agents`, 'AGENT_NOT_FOUND', agentView),
    }),
  ];
}
