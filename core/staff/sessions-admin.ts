/**
 * Session administration (SPEC 4.4 `GET /sessions?userId=`, `DELETE /sessions/{id}`; issue 14
 * item 4), tenant-scoped like every administration route:
 * - GET lists the live sessions of one subject of the caller's tenant, whoever it is: a customer,
 *   an agent or a staff member (the id is the subject's). Admin and support. For a caller without
 *   the admin role (support) the source address is cut to its network (IPv4 /16, IPv6 /48: where,
 *   not which connection) and the device id to its last four characters; ids, times and AAL stay
 *   (support needs them to tell sessions apart and to ask an admin to end one).
 * - DELETE revokes one session of the tenant (Admin only; revoking another session needs AAL 2
 *   at the edge, issue 16 item 2). The trigger NOTIFYs `sessions_changed`, so every edge refuses
 *   the session's next request.
 * Both are audited naming the acting person (`staff:<id>`, AAL, session).
 */
import { Type } from '@sinclair/typebox';
import { appendAudit } from '../../shared/audit.ts';
import { AppError } from '../../shared/errors.ts';
import { adminRoute, actorAttrs, type AdminDeps, type Caller } from '../admin/http.ts';
import { ItemsOf, Uuid } from '../admin/schemas.ts';
import type { RouteSpec } from '../http/route.ts';
import { revokeSession } from '../identity/sessions.ts';
import { SubjectSession } from './schemas.ts';
import { declared } from '../http/declared.ts';

interface SessionRow {
  id: string;
  subject_type: string;
  subject_id: string;
  created_at: Date;
  last_seen: Date;
  aal: number;
  device: string | null;
  ip: string | null;
}

/** IPv4 to its /16, IPv6 to its /48: the network a session came from, not the address. */
export function maskIp(ip: string): string {
  const v4 = /^(?:::ffff:)?(\d+)\.(\d+)\.\d+\.\d+$/.exec(ip);
  if (v4) return `${v4[1]}.${v4[2]}.x.x`;
  const groups = ip.split(':');
  return groups.length > 3 ? `${groups.slice(0, 3).join(':')}::/48` : 'masked';
}

export const maskDevice = (device: string): string =>
  device.length <= 4 ? '****' : `****${device.slice(-4)}`;

function view(r: SessionRow, masked: boolean) {
  return {
    id: r.id,
    subjectType: r.subject_type === 'user' ? 'staff' : r.subject_type,
    subjectId: r.subject_id,
    createdAt: r.created_at.toISOString(),
    lastSeen: r.last_seen.toISOString(),
    aal: r.aal,
    device: r.device === null ? null : masked ? maskDevice(r.device) : r.device,
    ip: r.ip === null ? null : masked ? maskIp(r.ip) : r.ip,
  };
}

async function auditRead(
  deps: AdminDeps,
  caller: Caller,
  requestId: string,
  userId: string,
  count: number,
  masked: boolean,
): Promise<void> {
  await deps.db.tx((q) =>
    appendAudit(q, [
      {
        tenantId: caller.tenantId,
        actor: { type: 'staff', id: caller.principalId },
        action: 'session.list',
        target: { type: 'subject', id: userId },
        attrs: { requestId, ip: caller.ip, roles: caller.roles, ...actorAttrs(caller), count, masked },
        ts: new Date(deps.now()),
      },
    ]),
  );
}

export function sessionAdminRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.sessions'];
  return [
    adminRoute(deps, {
      ...declared('GET', '/sessions'),
      operationId: 'listSubjectSessions',
      tags,
      mode: 'read',
      summary: 'Live sessions of a customer, agent or staff member of the tenant (masked for support)',
      query: Type.Object({ userId: Uuid }, { additionalProperties: false }),
      responses: { 200: { description: '{items: sessions, newest first}', schema: ItemsOf(SubjectSession) } },
      read: async (ctx, caller) => {
        const masked = !caller.roles.includes('admin');
        const { rows } = await deps.db.query<SessionRow>(
          `SELECT id, subject_type, subject_id, created_at, last_seen, aal, device, ip FROM sessions
           WHERE tenant_id = $1 AND subject_id = $2 AND revoked_at IS NULL ORDER BY created_at DESC LIMIT 100`,
          [caller.tenantId, ctx.query.userId],
        );
        await auditRead(deps, caller, ctx.requestId, ctx.query.userId, rows.length, masked);
        return { status: 200, body: { items: rows.map((r) => view(r, masked)) } };
      },
    }),
    adminRoute(deps, {
      ...declared('DELETE', '/sessions/{id}'),
      operationId: 'revokeSubjectSession',
      tags,
      mode: 'write',
      summary: 'Revoke a session of the tenant; every edge refuses its next request',
      params: Type.Object({ id: Uuid }),
      responses: { 204: { description: 'Revoked' } },
      write: async (ctx, w) => {
        const { rows } = await w.q.query<{ subject_type: string; subject_id: string; revoked: boolean }>(
          'SELECT subject_type, subject_id, revoked_at IS NOT NULL AS revoked FROM sessions WHERE tenant_id = $1 AND id = $2 FOR UPDATE',
          [w.caller.tenantId, ctx.params.id],
        );
        const s = rows[0];
        if (!s) throw new AppError('SESSION_NOT_FOUND', `no session ${ctx.params.id}`);
        const revoked = await revokeSession(
          w.q,
          w.caller.tenantId,
          ctx.params.id,
          'revoked_by_admin',
          { type: 'staff', id: w.caller.principalId },
          deps.now(),
        );
        await w.audit(
          'session.revoke_by_admin',
          { type: 'session', id: ctx.params.id },
          { subjectType: s.subject_type, subjectId: s.subject_id, alreadyRevoked: !revoked },
        );
        return { status: 204 };
      },
    }),
  ];
}
