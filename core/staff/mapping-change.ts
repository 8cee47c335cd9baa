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
 *
 * Set-based: a change costs the same few statements whatever the number of members (the roles
 * to take are worked out in one pass here, removed in one DELETE, forgotten from idp_roles in one
 * UPDATE and audited in one chained append), so a tenant of thousands answers well inside the
 * gateway's route timeout instead of committing after the client was answered 504.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import {
  federatedMembersIn,
  forgetIdpRolesOf,
  groupMappings,
  lockGroupMappings,
  putGroupMappings,
  removeStaffRoles,
  rolesUnderMappings,
  type FederatedMember,
  type GroupMapping,
  type StaffRole,
} from './store.ts';

/** One role taken from one member, and the groups whose mapping had given it. */
export interface RoleRevocation {
  userId: string;
  role: StaffRole;
  groups: string[];
}

/** What a change does besides writing the mappings, in the caller's transaction. */
export interface MappingChangeSteps {
  /**
   * Throws to refuse the change, judged against the mappings in force read under the mappings
   * lock (If-Match): nothing has been written yet.
   */
  precondition?: (current: readonly GroupMapping[]) => void;
  /** Appends one audit record per role taken, all in one append; not called when none is. */
  audit: (revoked: readonly RoleRevocation[]) => Promise<void>;
}

const pairKey = (a: string, b: string) => `${a}\u0000${b}`;

/** The groups whose old mappings give a role that their new mappings do not. */
function weakenedGroups(before: readonly GroupMapping[], after: readonly GroupMapping[]): string[] {
  const kept = new Set(after.map((m) => pairKey(m.idpGroup, m.role)));
  return [...new Set(before.filter((m) => !kept.has(pairKey(m.idpGroup, m.role))).map((m) => m.idpGroup))];
}

/**
 * The roles the change takes from one member, in role order: given by the old mappings, not by
 * the new, held now and (where recorded) given by the last sign-in.
 */
function revocationsOf(
  m: FederatedMember,
  before: readonly GroupMapping[],
  after: readonly GroupMapping[],
): RoleRevocation[] {
  const still = new Set(rolesUnderMappings(after, m.idpGroups));
  const groups = new Set(m.idpGroups);
  return rolesUnderMappings(before, m.idpGroups)
    .filter((role) => !still.has(role) && m.roles.includes(role))
    .filter((role) => !m.idpRoles || m.idpRoles.includes(role))
    .map((role) => ({
      userId: m.id,
      role,
      groups: before.filter((x) => x.role === role && groups.has(x.idpGroup)).map((x) => x.idpGroup),
    }));
}

/**
 * Replace the tenant's mappings and take away the roles they no longer give (caller's
 * transaction). Returns the mappings now in force and the roles taken, by member id then role.
 */
export async function replaceGroupMappings(
  q: Queryable,
  tenantId: string,
  mappings: readonly GroupMapping[],
  steps: MappingChangeSteps,
): Promise<{ mappings: GroupMapping[]; revoked: RoleRevocation[] }> {
  await lockGroupMappings(q, tenantId);
  const before = await groupMappings(q, tenantId);
  steps.precondition?.(before);
  await putGroupMappings(q, tenantId, mappings);
  const after = await groupMappings(q, tenantId);
  const members = await federatedMembersIn(q, tenantId, weakenedGroups(before, after));
  const planned = members.flatMap((m) => revocationsOf(m, before, after));
  // A role removed meanwhile (a SCIM user deleted) is not there to take: the DELETE says what was.
  const removed = new Set(
    (await removeStaffRoles(q, tenantId, planned)).map((r) => pairKey(r.userId, r.role)),
  );
  const revoked = planned.filter((r) => removed.has(pairKey(r.userId, r.role)));
  await forgetIdpRolesOf(q, tenantId, revoked);
  if (revoked.length > 0) await steps.audit(revoked);
  return { mappings: after, revoked };
}
