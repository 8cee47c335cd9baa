/**
 * Development seed (issue 16 item 4): a ready enrolment link for the demo Admin in demo.json
 * (`staff.admin.enrolmentPath`), so a newcomer opens http://localhost:<gateway port><enrolmentPath>,
 * registers a passkey and signs in. A link the previous run wrote is kept while still usable
 * (running the seed twice changes nothing); once used or expired, the next run issues a new one.
 */
import type { TxClient } from '../../shared/db/pool.ts';
import { createEnrolmentLink, enrolmentPath, liveLink } from './enrolment.ts';
import type { StaffUser } from './store.ts';

interface PreviousLink {
  token?: unknown;
  expiresAt?: unknown;
}

export async function demoEnrolment(
  q: TxClient,
  tenantId: string,
  user: StaffUser,
  previous: Record<string, unknown>,
  now: number,
) {
  const prev =
    (previous.staff as { admin?: { enrolmentLink?: PreviousLink } } | undefined)?.admin?.enrolmentLink ?? {};
  let link: { token: string; expiresAt: string } | undefined;
  if (typeof prev.token === 'string' && typeof prev.expiresAt === 'string') {
    const live = await liveLink(q, tenantId, prev.token, now).then(
      () => true,
      () => false,
    );
    if (live) link = { token: prev.token, expiresAt: prev.expiresAt };
  }
  link ??= await createEnrolmentLink(q, tenantId, user.id, { type: 'operator', id: 'demo-seed' }, now);
  return {
    signInPath: '/staff',
    admin: {
      userName: user.userName,
      userId: user.id,
      roles: user.roles,
      enrolmentLink: { token: link.token, expiresAt: link.expiresAt },
      // Open this under http://localhost:<gateway port>: passkeys need a domain, never an IP address.
      enrolmentPath: enrolmentPath(tenantId, link.token),
    },
  };
}
