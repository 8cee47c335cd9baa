/**
 * Replacing a tenant's group mappings (issue 16): the roles a removed or changed mapping gave a
 * federated member end with the change, in its transaction, not at the member's next sign-in.
 * Each member's groups are those of their last federated sign-in (staff_users.idp_groups,
 * migration 1050). Only roles are taken away: an added mapping counts from the next sign-in, as
 * before. A role the member's groups still come to (by name or another mapping) stays, and so
 * does one the member's groups never gave (granted by SCIM or the admin API): only a role that
 * sign-in gave (staff_users.idp_roles, migration 1070) is taken, so a role SCIM granted under a
 * mapping added after the sign-in survives that mapping's removal. The member's
 * sessions stay, as they do when SCIM takes a role away: the edge refuses the removed role at
 * the next request (edge/auth/staff.ts, told by the staff_user_roles trigger) and a refresh
 * carries the roles held now.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import {
  changeStaffRole,
  federatedMembersIn,
  forgetIdpRoles,
  groupMappings,
  lockGroupMappings,
  putGroupMappings,
  rolesUnderMappings,
  type GroupMapping,
  type StaffRole,
} from './store.ts';

/** One role taken from one member, and the groups whose mapping had given it. */
export interface RoleRevocation {
  userId: string;
  role: StaffRole;
  groups: string[];
}

/** The groups whose old mappings give a role that their new mappings do not. */
function weakenedGroups(before: readonly GroupMapping[], after: readonly GroupMapping[]): string[] {
  const kept = new Set(after.map((m) => `${m.idpGroup}\u0000${m.role}`));
  return [...new Set(before.filter((m) => !kept.has(`${m.idpGroup}\u0000${m.role}`)).map((m) => m.idpGroup))];
}

/**
 * Replace the tenant's mappings and take away the roles they no longer give (caller's
 * transaction; `audit` appends one record per role taken, in that transaction).
 */
export async function replaceGroupMappings(
  q: Queryable,
  tenantId: string,
  mappings: readonly GroupMapping[],
  audit: (r: RoleRevocation) => Promise<void>,
): Promise<RoleRevocation[]> {
  await lockGroupMappings(q, tenantId);
  const before = await groupMappings(q, tenantId);
  await putGroupMappings(q, tenantId, mappings);
  const after = await groupMappings(q, tenantId);
  const revoked: RoleRevocation[] = [];
  for (const m of await federatedMembersIn(q, tenantId, weakenedGroups(before, after))) {
    const still = new Set(rolesUnderMappings(after, m.idpGroups));
    const taken: StaffRole[] = [];
    for (const role of rolesUnderMappings(before, m.idpGroups)) {
      if (still.has(role) || !m.roles.includes(role)) continue;
      if (m.idpRoles && !m.idpRoles.includes(role)) continue;
      if (!(await changeStaffRole(q, tenantId, m.id, role, false))) continue;
      const groups = before
        .filter((x) => x.role === role && m.idpGroups.includes(x.idpGroup))
        .map((x) => x.idpGroup);
      const r = { userId: m.id, role, groups };
      await audit(r);
      revoked.push(r);
      taken.push(role);
    }
    if (taken.length > 0) await forgetIdpRoles(q, tenantId, m.id, taken);
  }
  return revoked;
}
