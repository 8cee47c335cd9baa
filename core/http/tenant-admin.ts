/**
 * The caller of a tenant's administration of its machine credentials (`/api-keys`,
 * `/v1/oauth-clients`): the edge's identity headers name the tenant and principal; the roles are
 * the route's declaration's (shared/routes/clients.ts: changes admin, reads admin or ops).
 */
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from './route.ts';

/** Who acts: the principal, and for a staff person the AAL and session their audit records name (issue 14 item 6). */
export interface AdminActor {
  id: string;
  aal: number;
  sessionId: string | undefined;
}

export function tenantAdmin(ctx: RequestContext<unknown, unknown, unknown>): {
  tenantId: string;
  actor: AdminActor;
} {
  const { tenantId, principalId, roles, aal, sessionId } = ctx.identity;
  if (!tenantId || !principalId) throw new AppError('UNAUTHORIZED', 'a staff credential is required');
  const allowed = ctx.routeRoles;
  if (!roles.some((r) => allowed.includes(r)))
    throw new AppError('FORBIDDEN', `role ${allowed.join(' or ')} is required`);
  return { tenantId, actor: { id: principalId, aal: aal ?? 1, sessionId } };
}
