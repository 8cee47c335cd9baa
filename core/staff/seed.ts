/**
 * Development seed (issue 16 item 4): a demo Admin staff member and a ready enrolment link for
 * them in demo.json (`staff.admin.enrolmentPath`), so a newcomer opens
 * http://localhost:<gateway port><enrolmentPath>, registers a passkey and signs in. A link the
 * previous run wrote is kept while still usable (running the seed twice changes nothing); once
 * used or expired, the next run issues a new one. SCIM's seed provisions staff through its own
 * code path when it lands; this one only makes sure the demo admin exists.
 */
import type { Seeder } from '../seed.ts';
import { createEnrolmentLink, enrolmentPath, liveLink } from './enrolment.ts';
import { setStaffRoles, staffUserByName } from './store.ts';
import { uuidv7 } from '../../shared/uuid.ts';

export const demoAdminUserName = 'admin@demo.example';

interface PreviousLink { token?: unknown; expiresAt?: unknown }

export const staffSeeder: Seeder = async ({ db, tenantId, previous }) => db.tx(async (q) => {
  const now = Date.now();
  let user = await staffUserByName(q, tenantId, demoAdminUserName);
  if (!user) {
    const id = uuidv7(now);
    await q.query('INSERT INTO staff_users (tenant_id, id, user_name, display_name) VALUES ($1, $2, $3, $4)', [tenantId, id, demoAdminUserName, 'Demo Admin']);
    await setStaffRoles(q, tenantId, id, ['admin']);
    user = await staffUserByName(q, tenantId, demoAdminUserName);
  }
  if (!user) throw new Error('demo admin could not be created');
  const prev = ((previous.staff as { admin?: { enrolmentLink?: PreviousLink } } | undefined)?.admin?.enrolmentLink ?? {});
  let link: { token: string; expiresAt: string } | undefined;
  if (typeof prev.token === 'string' && typeof prev.expiresAt === 'string') {
    const live = await liveLink(q, tenantId, prev.token, now).then(() => true, () => false);
    if (live) link = { token: prev.token, expiresAt: prev.expiresAt };
  }
  link ??= await createEnrolmentLink(q, tenantId, user.id, { type: 'operator', id: 'demo-seed' }, now);
  return {
    staff: {
      signInPath: '/staff',
      admin: {
        userName: user.userName, userId: user.id, roles: user.roles,
        enrolmentLink: { token: link.token, expiresAt: link.expiresAt },
        // Open this under http://localhost:<gateway port>: passkeys need a domain, never an IP address.
        enrolmentPath: enrolmentPath(tenantId, link.token),
      },
    },
  };
});
