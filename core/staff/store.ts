/**
 * Staff members (issue 14; DESIGN "People and machines"): people provisioned by the operator's
 * identity provider over SCIM, holding roles in their own tenant. This module owns the
 * `staff_users`, `staff_user_roles` and `staff_group_mappings` tables (migration 0800); SCIM,
 * federation and passkeys build on it.
 */
import type { Queryable } from '../../shared/db/pool.ts';

/** The six staff roles; SCIM Groups carry these display names, tokens the lower-case role. */
export const staffRoleGroups = {
  Admin: 'admin', Ops: 'ops', ReadOnly: 'readonly', support: 'support', fraud: 'fraud', compliance: 'compliance',
} as const;
export type StaffRole = (typeof staffRoleGroups)[keyof typeof staffRoleGroups];
export const staffRoles: readonly StaffRole[] = Object.values(staffRoleGroups);

export function isStaffRole(r: string): r is StaffRole {
  return (staffRoles as readonly string[]).includes(r);
}

/** How audit records and idempotency frames name a staff member. */
export const staffSubject = (userId: string) => `staff:${userId}`;

export interface StaffUser {
  tenantId: string;
  id: string;
  userName: string;
  externalId: string | null;
  displayName: string | null;
  attributes: Record<string, unknown>;
  active: boolean;
  version: number;
  createdAt: Date;
  updatedAt: Date;
  /** Set when deleted: the row is a tombstone. */
  deletedAt: Date | null;
  roles: StaffRole[];
}

interface Row {
  tenant_id: string; id: string; user_name: string; external_id: string | null; display_name: string | null;
  attributes: Record<string, unknown>; active: boolean; version: number; created_at: Date; updated_at: Date;
  deleted_at: Date | null; roles: string[] | null;
}

const selectUser = `SELECT u.tenant_id, u.id, u.user_name, u.external_id, u.display_name, u.attributes, u.active, u.version,
    u.created_at, u.updated_at, u.deleted_at,
    (SELECT array_agg(r.role ORDER BY r.role) FROM staff_user_roles r WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id) AS roles
  FROM staff_users u`;

function toUser(r: Row): StaffUser {
  return {
    tenantId: r.tenant_id, id: r.id, userName: r.user_name, externalId: r.external_id, displayName: r.display_name,
    attributes: r.attributes, active: r.active, version: r.version, createdAt: r.created_at, updatedAt: r.updated_at,
    deletedAt: r.deleted_at, roles: (r.roles ?? []).filter(isStaffRole),
  };
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A staff member of the tenant by id (tombstones included: check `deletedAt`). */
export async function staffUserById(q: Queryable, tenantId: string, id: string): Promise<StaffUser | undefined> {
  if (!uuidPattern.test(id)) return undefined;
  const { rows } = await q.query<Row>(`${selectUser} WHERE u.tenant_id = $1 AND u.id = $2`, [tenantId, id]);
  return rows[0] ? toUser(rows[0]) : undefined;
}

/** A live (not deleted) staff member of the tenant by userName, compared case-insensitively. */
export async function staffUserByName(q: Queryable, tenantId: string, userName: string): Promise<StaffUser | undefined> {
  const { rows } = await q.query<Row>(
    `${selectUser} WHERE u.tenant_id = $1 AND lower(u.user_name) = lower($2) AND u.deleted_at IS NULL`, [tenantId, userName]);
  return rows[0] ? toUser(rows[0]) : undefined;
}

/** Replace a staff member's roles (caller's transaction; the trigger tells the edges). */
export async function setStaffRoles(q: Queryable, tenantId: string, userId: string, roles: readonly StaffRole[]): Promise<void> {
  await q.query('DELETE FROM staff_user_roles WHERE tenant_id = $1 AND user_id = $2 AND NOT (role = ANY($3))', [tenantId, userId, roles]);
  if (roles.length > 0) {
    await q.query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) SELECT $1, $2, unnest($3::text[]) ON CONFLICT DO NOTHING`,
      [tenantId, userId, roles],
    );
  }
}

/** The roles a tenant maps the given identity-provider group names (or role names) onto. */
export async function rolesForGroups(q: Queryable, tenantId: string, groups: readonly string[]): Promise<StaffRole[]> {
  const direct = new Set<StaffRole>();
  for (const g of groups) {
    const byName = (staffRoleGroups as Record<string, StaffRole>)[g];
    if (byName) direct.add(byName);
  }
  if (groups.length > 0) {
    const { rows } = await q.query<{ role: string }>(
      'SELECT DISTINCT role FROM staff_group_mappings WHERE tenant_id = $1 AND idp_group = ANY($2)', [tenantId, groups]);
    for (const r of rows) if (isStaffRole(r.role)) direct.add(r.role);
  }
  return [...direct].sort();
}
