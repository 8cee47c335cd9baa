/**
 * Demo staff (issue 14 item 7): a SCIM credential for the demo tenant, written to demo.json as
 * `scim: {baseUrl, token}` so a newcomer can point a SCIM client (or curl) at the gateway, and
 * two staff members provisioned THROUGH the SCIM service functions an identity provider's
 * requests reach (users.ts, groups.ts), not by SQL: an Admin and an Ops person, listed under
 * `staff.members`. The machine service tokens of demo.json stay as they are.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import type { Seeder } from '../seed.ts';
import { hashScimToken, issueScimCredential, scimTokenPrefix } from './credentials.ts';
import { patchGroup, roleGroupId } from './scim/groups.ts';
import { scimBasePath } from './scim/routes.ts';
import { createUser, type ScimActor, type ScimDeps } from './scim/users.ts';
import { staffUserByName, type StaffRole } from './store.ts';
import { demoEnrolment } from './enrolment-seed.ts';

/** Who the demo staff are (userName, display name, role). */
export const demoStaff: readonly { userName: string; displayName: string; role: StaffRole }[] = [
  { userName: 'ada.admin@demo.example', displayName: 'Ada Admin', role: 'admin' },
  { userName: 'otto.ops@demo.example', displayName: 'Otto Ops', role: 'ops' },
];

/** The previous run's SCIM credential when it is still live (stable across restarts via demo.json). */
async function previousCredential(
  q: Queryable,
  tenantId: string,
  previous: Record<string, unknown>,
): Promise<{ id: string; token: string } | undefined> {
  const token = (previous.scim as { token?: unknown } | undefined)?.token;
  if (typeof token !== 'string' || !token.startsWith(scimTokenPrefix)) return undefined;
  const { rows } = await q.query<{ id: string }>(
    'SELECT id FROM scim_credentials WHERE tenant_id = $1 AND token_hash = $2 AND revoked_at IS NULL',
    [tenantId, hashScimToken(token)],
  );
  return rows[0] ? { id: rows[0].id, token } : undefined;
}

export function staffSeeder(gatewayUrl: string | undefined): Seeder {
  return async ({ db, tenantId, previous }) => {
    const now = Date.now();
    const credential =
      (await previousCredential(db, tenantId, previous)) ??
      (await db.tx(async (q) => {
        const issued = await issueScimCredential(q, tenantId, 'demo identity provider', 'seed', now);
        return { id: issued.credential.id, token: issued.token };
      }));
    const baseUrl = `${gatewayUrl ?? ''}${scimBasePath}`;
    const deps: ScimDeps = { db, now: Date.now, baseUrl };
    const actor: ScimActor = {
      tenantId,
      principalId: `scim-credential:${credential.id}`,
      requestId: 'seed',
      ip: undefined,
    };
    const staff: { id: string; userName: string; roles: StaffRole[] }[] = [];
    for (const s of demoStaff) {
      const existing = await staffUserByName(db, tenantId, s.userName);
      const user =
        existing ??
        (await createUser(deps, actor, {
          schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
          userName: s.userName,
          displayName: s.displayName,
          emails: [{ value: s.userName, type: 'work', primary: true }],
        }));
      if (!user.roles.includes(s.role)) {
        await patchGroup(deps, actor, roleGroupId(tenantId, s.role), {
          schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
          Operations: [{ op: 'add', path: 'members', value: [{ value: user.id }] }],
        });
      }
      staff.push({ id: user.id, userName: s.userName, roles: [s.role] });
    }
    // The demo Admin gets a passkey enrolment link (issue 16 item 4): `staff.admin`.
    const admin = await staffUserByName(db, tenantId, demoStaff[0]!.userName);
    if (!admin) throw new Error('demo admin was not provisioned');
    const signIn = await db.tx((q) => demoEnrolment(q, tenantId, admin, previous, now));
    return { scim: { baseUrl, token: credential.token }, staff: { members: staff, ...signIn } };
  };
}
