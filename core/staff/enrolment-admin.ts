/**
 * An Admin re-issues a staff member's enrolment link (issue 16 item 1: a lost passkey). The
 * edge requires AAL 2 for `enrolment.reissue` (the step-up policy); core checks the Admin role
 * again, keeps to the caller's tenant (another tenant's member is 404), and answers with the
 * link once: a replay with the same Idempotency-Key returns it to the same Admin only (stored
 * sealed, core/idempotency/secrets.ts).
 */
import { Type } from '@sinclair/typebox';
import type { RouteSpec } from '../http/route.ts';
import { adminRoute, type AdminDeps } from '../admin/http.ts';
import { Uuid } from '../ledger/schemas.ts';
import { createEnrolmentLink } from './enrolment.ts';
import { EnrolmentLink } from './schemas.ts';
import { staffUserById } from './store.ts';
import { AppError } from '../../shared/errors.ts';
import { declared } from '../http/declared.ts';

export function enrolmentAdminRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    adminRoute(deps, {
      ...declared('POST', '/v1/staff/users/{id}/enrolment-links'),
      operationId: 'reissueEnrolmentLink',
      tags: ['admin.staff'],
      mode: 'create',
      summary:
        'Issue a new one-time passkey enrolment link for a staff member (valid 24 h; replaces their unused ones); the token is shown once',
      params: Type.Object({ id: Uuid }),
      responses: { 201: { description: 'The link', schema: EnrolmentLink } },
      write: async (ctx, w) => {
        const user = await staffUserById(w.q, w.caller.tenantId, ctx.params.id);
        if (!user || user.deletedAt)
          throw new AppError('STAFF_USER_NOT_FOUND', 'no such staff member in your tenant');
        const link = await createEnrolmentLink(
          w.q,
          w.caller.tenantId,
          user.id,
          { type: 'staff', id: w.caller.principalId },
          deps.now(),
        );
        return { status: 201, body: link };
      },
    }),
  ];
}
