/**
 * The caller of a tenant's administration of its machine credentials (`/api-keys`,
 * `/v1/oauth-clients`): the edge's identity headers name the tenant and principal; changes
 * need the admin role, reads admin or ops.
 */
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from './route.ts';

export function tenantAdmin(ctx: RequestContext<unknown, unknown, unknown>, mutate: boolean): { tenantId: string; actor: string } {
  const { tenantId, principalId, roles } = ctx.identity;
  if (!tenantId || !principalId) throw new AppError('UNAUTHORIZED', 'a staff credential is required');
  const allowed = mutate ? ['admin'] : ['admin', 'ops'];
  if (!roles.some((r) => allowed.includes(r))) throw new AppError('FORBIDDEN', `role ${allowed.join(' or ')} is required`);
  return { tenantId, actor: principalId };
}
