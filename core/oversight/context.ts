/**
 * What every staff-purpose route (issue 20 item 4; SPEC 2.5) needs: the staff caller the edge
 * established, its role checked again here (defence in depth behind the edge's policy), and the
 * decision the request rode on for audit records.
 */
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';

export interface OversightDeps {
  db: Db;
  now: () => number;
}

export interface StaffCaller {
  tenantId: string;
  principalId: string;
  roles: string[];
  aal: number;
}

type AnyCtx = RequestContext<unknown, unknown, unknown>;

export const staffHeader = {
  name: 'Authorization',
  required: true,
  description: 'Bearer <staff access token or service token>',
};

/**
 * The staff caller holding one of the roles the route's declaration names (shared/routes/,
 * issue 21 item 1: roles are declared once); 401 without an edge identity, 403 without one.
 */
export function staffOf(ctx: AnyCtx): StaffCaller {
  const id = ctx.identity;
  if (!id.fromEdge || !id.tenantId || !id.principalId)
    throw new AppError('UNAUTHORIZED', 'a staff credential is required');
  if (!id.roles.some((r) => ctx.routeRoles.includes(r)))
    throw new AppError('FORBIDDEN', `this route needs one of the roles ${ctx.routeRoles.join(', ')}`);
  return { tenantId: id.tenantId, principalId: id.principalId, roles: id.roles, aal: id.aal ?? 0 };
}

/**
 * The audit actor of a staff request (SPEC 6.3: who). Under which decision, from where and at
 * which AAL the pipeline adds to every record (core/http/audit-facts.ts; issue 20 item 5).
 */
export function auditOf(_ctx: AnyCtx, caller: { principalId: string }, type = 'staff') {
  return { actor: { type, id: caller.principalId }, decision: {}, attrs: {} };
}
