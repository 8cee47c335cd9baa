/**
 * A new tenant's first credentials (issue 20 item 1), issued by a platform admin (an Admin of
 * the operator tenant, AAL 2 at the edge: registry `staff_aal2_actions`) for a tenant the
 * operator created (`owner` tuple; the edge allows these actions through `owner_actions` only):
 * - `POST /v1/tenants/{tenantId}/first-admin`: a staff member with the admin role in the new
 *   tenant and a one-time passkey enrolment link (core/staff/enrolment.ts), shown once;
 * - `POST /v1/tenants/{tenantId}/scim-credentials`: the tenant's SCIM bearer credential, shown once.
 * The new tenant's own chain records the link or credential (actor: the platform admin); the
 * operator's records the request (adminRoute's audit).
 */
import { Type } from '@sinclair/typebox';
import { appendAudit } from '../../../shared/audit.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import type { RouteSpec } from '../../http/route.ts';
import { TenantId } from '../../identity/schemas.ts';
import { requirePlatformAdminTenant } from '../../platform/operator.ts';
import { issueScimCredential } from '../../staff/credentials.ts';
import { createEnrolmentLink } from '../../staff/enrolment.ts';
import { EnrolmentLink, IssuedScimCredential } from '../../staff/schemas.ts';
import { setStaffRoles } from '../../staff/store.ts';
import { adminRoute, type AdminDeps, type Caller } from '../http.ts';
import { Uuid } from '../schemas.ts';
import { declared } from '../../http/declared.ts';

const Params = Type.Object({ tenantId: TenantId });
const UserName = Type.String({ minLength: 1, maxLength: 256, pattern: '^[^\\s].*$' });
const FirstAdmin = Type.Object({
  userId: Uuid,
  userName: Type.String(),
  tenantId: TenantId,
  link: EnrolmentLink,
});
const noStore = { 'cache-control': 'no-store' };

/**
 * The caller is a platform admin and `tenantId` one the operator created (not the operator
 * itself: its own Admins use the tenant's ordinary routes). Another tenant is 404, as elsewhere.
 */
export async function requireOnboardedTenant(q: Queryable, caller: Caller, tenantId: string): Promise<void> {
  await requirePlatformAdminTenant(q, caller.tenantId);
  const { rows } = await q.query(
    'SELECT 1 FROM admin_tenant_owners WHERE tenant_id = $1 AND owner_tenant_id = $2',
    [tenantId, caller.tenantId],
  );
  if (rows.length === 0) throw new AppError('TENANT_NOT_FOUND', `no tenant ${tenantId}`);
}

const tags = ['admin.tenants'];

const issueTenantFirstAdminRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/tenants/{tenantId}/first-admin'),
    operationId: 'issueTenantFirstAdmin',
    tags,
    mode: 'create',
    summary:
      "Platform admins: create a tenant's first Admin (a staff member) and its one-time passkey enrolment link (valid 24 h; shown once)",
    params: Params,
    body: Type.Object(
      { userName: UserName, displayName: Type.Optional(Type.String({ maxLength: 200 })) },
      { additionalProperties: false },
    ),
    responses: {
      201: {
        description: 'The Admin and its enrolment link (the token is shown once)',
        schema: FirstAdmin,
      },
    },
    write: async (ctx, w) => {
      const tenantId = ctx.params.tenantId;
      await requireOnboardedTenant(w.q, w.caller, tenantId);
      const userId = uuidv7(deps.now());
      const { rows } = await w.q.query(
        `INSERT INTO staff_users (tenant_id, id, user_name, display_name) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING id`,
        [tenantId, userId, ctx.body.userName, ctx.body.displayName ?? null],
      );
      if (rows.length === 0)
        throw new AppError(
          'STAFF_USER_EXISTS',
          `${tenantId} already has a staff member ${ctx.body.userName}`,
        );
      await setStaffRoles(w.q, tenantId, userId, ['admin']);
      const actor = { type: 'staff', id: w.caller.principalId };
      await appendAudit(w.q, [
        {
          tenantId,
          actor,
          action: 'staff.first_admin.create',
          target: { type: 'staff_user', id: userId },
          decision: { allow: true },
          attrs: { requestId: ctx.requestId, operator: w.caller.tenantId, aal: w.caller.aal },
          ts: new Date(deps.now()),
        },
      ]);
      const link = await createEnrolmentLink(w.q, tenantId, userId, actor, deps.now());
      await w.audit('tenant.first_admin.issue', { type: 'tenant', id: tenantId }, { userId, link: link.id });
      return {
        status: 201,
        headers: noStore,
        body: { userId, userName: ctx.body.userName, tenantId, link },
      };
    },
  });

const issueTenantScimCredentialRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/tenants/{tenantId}/scim-credentials'),
    operationId: 'issueTenantScimCredential',
    tags,
    mode: 'create',
    summary:
      "Platform admins: issue a tenant's SCIM bearer credential (its identity provider provisions its staff; the token is shown once)",
    params: Params,
    body: Type.Object(
      { name: Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9 ._:-]*$' }) },
      { additionalProperties: false },
    ),
    responses: {
      201: {
        description: 'The credential and its token (never shown again)',
        schema: IssuedScimCredential,
      },
    },
    write: async (ctx, w) => {
      const tenantId = ctx.params.tenantId;
      await requireOnboardedTenant(w.q, w.caller, tenantId);
      const { credential, token } = await issueScimCredential(
        w.q,
        tenantId,
        ctx.body.name,
        w.caller.principalId,
        deps.now(),
      );
      await appendAudit(w.q, [
        {
          tenantId,
          actor: { type: 'staff', id: w.caller.principalId },
          action: 'scim_credential.issue',
          target: { type: 'scim_credential', id: credential.id },
          decision: { allow: true },
          attrs: {
            requestId: ctx.requestId,
            operator: w.caller.tenantId,
            name: credential.name,
            aal: w.caller.aal,
          },
          ts: new Date(deps.now()),
        },
      ]);
      await w.audit(
        'tenant.scim_credential.issue',
        { type: 'tenant', id: tenantId },
        { credential: credential.id, name: credential.name },
      );
      return { status: 201, headers: noStore, body: { ...credential, token } };
    },
  });

export function firstAdminRoutes(deps: AdminDeps): RouteSpec[] {
  return [issueTenantFirstAdminRoute(deps), issueTenantScimCredentialRoute(deps)];
}
