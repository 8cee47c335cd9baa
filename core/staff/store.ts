/**
 * Staff members (issue 14; DESIGN "People and machines"): people provisioned by the operator's
 * identity provider over SCIM, holding roles in their own tenant. This module owns the
 * `staff_users`, `staff_user_roles` and `staff_group_mappings` tables (migration 0800); SCIM,
 * federation and passkeys build on it.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { uuidText } from '../../shared/uuid.ts';

/**
 * The staff roles; SCIM Groups carry these display names, tokens the lower-case role.
 * `policy_author` (issue 22): uploads candidate bundles and runs their impact on recorded decisions.
 */
export const staffRoleGroups = {
  Admin: 'admin',
  Ops: 'ops',
  ReadOnly: 'readonly',
  support: 'support',
  fraud: 'fraud',
  compliance: 'compliance',
  PolicyAuthor: 'policy_author',
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
  tenant_id: string;
  id: string;
  user_name: string;
  external_id: string | null;
  display_name: string | null;
  attributes: Record<string, unknown>;
  active: boolean;
  version: number;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
  roles: string[] | null;
}

const selectUser = `SELECT u.tenant_id, u.id, u.user_name, u.external_id, u.display_name, u.attributes, u.active, u.version,
    u.created_at, u.updated_at, u.deleted_at,
    (SELECT array_agg(r.role ORDER BY r.role) FROM staff_user_roles r WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id) AS roles
  FROM staff_users u`;

function toUser(r: Row): StaffUser {
  return {
    tenantId: r.tenant_id,
    id: r.id,
    userName: r.user_name,
    externalId: r.external_id,
    displayName: r.display_name,
    attributes: r.attributes,
    active: r.active,
    version: r.version,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    deletedAt: r.deleted_at,
    roles: (r.roles ?? []).filter(isStaffRole),
  };
}

/** A staff member of the tenant by id (tombstones included: check `deletedAt`). */
export async function staffUserById(
  q: Queryable,
  tenantId: string,
  id: string,
): Promise<StaffUser | undefined> {
  if (!uuidText.test(id)) return undefined;
  const { rows } = await q.query<Row>(`${selectUser} WHERE u.tenant_id = $1 AND u.id = $2`, [tenantId, id]);
  return rows[0] ? toUser(rows[0]) : undefined;
}

/** A live (not deleted) staff member of the tenant by userName, compared case-insensitively. */
export async function staffUserByName(
  q: Queryable,
  tenantId: string,
  userName: string,
): Promise<StaffUser | undefined> {
  const { rows } = await q.query<Row>(
    `${selectUser} WHERE u.tenant_id = $1 AND lower(u.user_name) = lower($2) AND u.deleted_at IS NULL`,
    [tenantId, userName],
  );
  return rows[0] ? toUser(rows[0]) : undefined;
}

/**
 * Lock the members' rows (in id order) before their role rows: a role change bumps the member's
 * version (migration 1080), so it takes the member row after the role row unless it holds it
 * first, the reverse of a deletion (lockStaffUser, then its roles): the two deadlocked.
 */
async function lockMembers(q: Queryable, tenantId: string, ids: readonly string[]): Promise<void> {
  await q.query(
    'SELECT 1 FROM staff_users WHERE tenant_id = $1 AND id = ANY($2::uuid[]) ORDER BY id FOR NO KEY UPDATE',
    [tenantId, [...new Set(ids)]],
  );
}

/** Replace a staff member's roles (caller's transaction; the trigger tells the edges). */
export async function setStaffRoles(
  q: Queryable,
  tenantId: string,
  userId: string,
  roles: readonly StaffRole[],
): Promise<void> {
  await lockMembers(q, tenantId, [userId]);
  await q.query(
    'DELETE FROM staff_user_roles WHERE tenant_id = $1 AND user_id = $2 AND NOT (role = ANY($3))',
    [tenantId, userId, roles],
  );
  if (roles.length > 0) {
    await q.query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) SELECT $1, $2, unnest($3::text[]) ON CONFLICT DO NOTHING`,
      [tenantId, userId, roles],
    );
  }
}

/** The roles the group names themselves name (`Admin`, `Ops`, ...): no mapping needed. */
function namedRoles(groups: readonly string[]): Set<StaffRole> {
  const direct = new Set<StaffRole>();
  const byName: Record<string, StaffRole> = staffRoleGroups;
  for (const g of groups) {
    // Own keys only: a provider's group named `constructor` or `__proto__` would otherwise read
    // an inherited Object member, and setStaffRoles would write its text as a role.
    const role = Object.hasOwn(byName, g) ? byName[g] : undefined;
    if (role) direct.add(role);
  }
  return direct;
}

/** The roles the given group names (or role names) come to under `mappings` (no database). */
export function rolesUnderMappings(
  mappings: readonly GroupMapping[],
  groups: readonly string[],
): StaffRole[] {
  const roles = namedRoles(groups);
  const held = new Set(groups);
  for (const m of mappings) if (held.has(m.idpGroup)) roles.add(m.role);
  return [...roles].sort();
}

/** The roles a tenant maps the given identity-provider group names (or role names) onto. */
export async function rolesForGroups(
  q: Queryable,
  tenantId: string,
  groups: readonly string[],
): Promise<StaffRole[]> {
  const direct = namedRoles(groups);
  if (groups.length > 0) {
    const { rows } = await q.query<{ role: string }>(
      'SELECT DISTINCT role FROM staff_group_mappings WHERE tenant_id = $1 AND idp_group = ANY($2)',
      [tenantId, groups],
    );
    for (const r of rows) if (isStaffRole(r.role)) direct.add(r.role);
  }
  return [...direct].sort();
}

/**
 * One writer of the tenant's group mappings and of federated roles at a time (caller's
 * transaction; issue 16): a sign-in that read the mappings a concurrent PUT is replacing would
 * otherwise commit a role the PUT has just taken away from everyone else.
 */
export async function lockGroupMappings(q: Queryable, tenantId: string): Promise<void> {
  await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`staff-group-mappings:${tenantId}`]);
}

/**
 * Record the groups of a member's federated sign-in and the roles they gave (caller's
 * transaction; migrations 1050, 1070).
 */
export async function recordIdpGroups(
  q: Queryable,
  tenantId: string,
  userId: string,
  groups: readonly string[],
  roles: readonly StaffRole[],
): Promise<void> {
  await q.query('UPDATE staff_users SET idp_groups = $3, idp_roles = $4 WHERE tenant_id = $1 AND id = $2', [
    tenantId,
    userId,
    groups,
    roles,
  ]);
}

/**
 * These roles no longer count as the last sign-in's (migration 1070), for many members at once, in
 * one statement (caller's transaction): a mapping
 * change that takes roles from thousands of members costs one UPDATE, not one per member.
 */
export async function forgetIdpRolesOf(
  q: Queryable,
  tenantId: string,
  taken: readonly { userId: string; role: StaffRole }[],
): Promise<void> {
  if (taken.length === 0) return;
  await q.query(
    `UPDATE staff_users u SET idp_roles = ARRAY(SELECT r FROM unnest(u.idp_roles) AS r WHERE NOT (r = ANY(t.roles)))
     FROM (SELECT p.user_id, array_agg(p.role) AS roles FROM unnest($2::uuid[], $3::text[]) AS p(user_id, role)
           GROUP BY p.user_id) AS t
     WHERE u.tenant_id = $1 AND u.id = t.user_id AND u.idp_roles IS NOT NULL`,
    [tenantId, taken.map((t) => t.userId), taken.map((t) => t.role)],
  );
}

/** A live member reached by a mapping change (federatedMembersIn). */
export interface FederatedMember {
  id: string;
  /** The groups of the member's last federated sign-in. */
  idpGroups: string[];
  /** The roles that sign-in gave; null where not recorded (migration 1070). */
  idpRoles: string[] | null;
  /** The roles held now. */
  roles: StaffRole[];
}

/**
 * The live members whose last federated sign-in carried any of `groups`, with those groups, the
 * roles that sign-in gave (null: not recorded) and the roles held now, by id. No row lock:
 * idp_groups is written only under lockGroupMappings, and a role removed meanwhile (a SCIM user
 * deleted) is settled by the rows removeStaffRoles returns.
 */
export async function federatedMembersIn(
  q: Queryable,
  tenantId: string,
  groups: readonly string[],
): Promise<FederatedMember[]> {
  if (groups.length === 0) return [];
  const { rows } = await q.query<{
    id: string;
    idp_groups: string[];
    idp_roles: string[] | null;
    roles: string[] | null;
  }>(
    `SELECT u.id, u.idp_groups, u.idp_roles,
       (SELECT array_agg(r.role ORDER BY r.role) FROM staff_user_roles r WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id) AS roles
     FROM staff_users u WHERE u.tenant_id = $1 AND u.deleted_at IS NULL AND u.idp_groups && $2::text[]
     ORDER BY u.id`,
    [tenantId, groups],
  );
  return rows.map((r) => ({
    id: r.id,
    idpGroups: r.idp_groups,
    idpRoles: r.idp_roles,
    roles: (r.roles ?? []).filter(isStaffRole),
  }));
}

/** What SCIM (or a seed) writes for a staff member; the store owns id, version and timestamps. */
export interface StaffUserFields {
  userName: string;
  externalId: string | null;
  displayName: string | null;
  attributes: Record<string, unknown>;
  active: boolean;
}

/** A userName already held by another live member of the tenant (the partial unique index). */
export class StaffUserNameTaken extends Error {
  constructor() {
    super('userName is already taken in this tenant');
  }
}

function uniqueViolation(err: unknown): boolean {
  return (err as { code?: string }).code === '23505';
}

/** One write to staff_users under a savepoint, so a duplicate userName leaves the transaction usable. */
async function writeUser(q: Queryable, sql: string, params: unknown[]): Promise<void> {
  try {
    await q.query('SAVEPOINT staff_user_write');
    await q.query(sql, params);
    await q.query('RELEASE SAVEPOINT staff_user_write');
  } catch (err) {
    await q.query('ROLLBACK TO SAVEPOINT staff_user_write');
    if (uniqueViolation(err)) throw new StaffUserNameTaken();
    throw err;
  }
}

/** Insert a member (caller's transaction); throws StaffUserNameTaken on a duplicate userName. */
export async function insertStaffUser(
  q: Queryable,
  tenantId: string,
  id: string,
  f: StaffUserFields,
  now: number,
): Promise<StaffUser> {
  await writeUser(
    q,
    `INSERT INTO staff_users (tenant_id, id, user_name, external_id, display_name, attributes, active, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8 / 1000.0), to_timestamp($8 / 1000.0))`,
    [tenantId, id, f.userName, f.externalId, f.displayName, JSON.stringify(f.attributes), f.active, now],
  );
  const user = await staffUserById(q, tenantId, id);
  if (!user) throw new Error('inserted staff member not found');
  return user;
}

/** A live member locked for update (caller's transaction), or undefined (absent or deleted). */
export async function lockStaffUser(
  q: Queryable,
  tenantId: string,
  id: string,
): Promise<StaffUser | undefined> {
  if (!uuidText.test(id)) return undefined;
  await q.query(
    'SELECT 1 FROM staff_users WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL FOR UPDATE',
    [tenantId, id],
  );
  const u = await staffUserById(q, tenantId, id);
  return u && !u.deletedAt ? u : undefined;
}

/** Replace a live member's fields and bump its version (the SCIM ETag). */
export async function updateStaffUser(
  q: Queryable,
  tenantId: string,
  id: string,
  f: StaffUserFields,
  now: number,
): Promise<StaffUser> {
  await writeUser(
    q,
    `UPDATE staff_users SET user_name = $3, external_id = $4, display_name = $5, attributes = $6, active = $7,
       version = version + 1, updated_at = to_timestamp($8 / 1000.0), roles_bumped_in = pg_current_xact_id()
     WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`,
    [tenantId, id, f.userName, f.externalId, f.displayName, JSON.stringify(f.attributes), f.active, now],
  );
  const user = await staffUserById(q, tenantId, id);
  if (!user) throw new Error('updated staff member not found');
  return user;
}

/**
 * Delete a member, keeping a tombstone (issue 14: `staff:<id>` in old audit records still
 * resolves through staffUserById): inactive, deleted_at set, roles dropped, userName freed.
 */
export async function tombstoneStaffUser(
  q: Queryable,
  tenantId: string,
  id: string,
  now: number,
): Promise<void> {
  await setStaffRoles(q, tenantId, id, []);
  await q.query(
    `UPDATE staff_users SET active = false, deleted_at = to_timestamp($3 / 1000.0), updated_at = to_timestamp($3 / 1000.0), version = version + 1
     WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`,
    [tenantId, id, now],
  );
}

/**
 * Revoke every live session of a staff member and its refresh tokens (caller's transaction, so
 * deprovisioning and revocation commit together; the sessions trigger tells the edges).
 * Returns the revoked session ids.
 */
export async function revokeStaffSessions(
  q: Queryable,
  tenantId: string,
  userId: string,
  reason: string,
  now: number,
): Promise<string[]> {
  const { rows } = await q.query<{ id: string }>(
    `UPDATE sessions SET revoked_at = to_timestamp($3 / 1000.0), revoke_reason = $4
     WHERE tenant_id = $1 AND subject_type = 'user' AND subject_id = $2 AND revoked_at IS NULL RETURNING id`,
    [tenantId, userId, now, reason],
  );
  const ids = rows.map((r) => r.id);
  if (ids.length > 0) {
    await q.query(
      `UPDATE refresh_tokens SET revoked_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND session_id = ANY($2::uuid[]) AND revoked_at IS NULL`,
      [tenantId, ids, now],
    );
  }
  return ids;
}

/** One page of live members matching `where` (a fragment over alias u with `$3`.. parameters). */
export async function listStaffUsers(
  q: Queryable,
  tenantId: string,
  where: { sql: string; params: unknown[] } | undefined,
  offset: number,
  limit: number,
): Promise<{ total: number; users: StaffUser[] }> {
  const cond = `u.tenant_id = $1 AND u.deleted_at IS NULL${where ? ` AND (${where.sql})` : ''}`;
  const params = [tenantId, ...(where?.params ?? [])];
  const { rows: count } = await q.query<{ n: string }>(
    `SELECT count(*) AS n FROM staff_users u WHERE ${cond}`,
    params,
  );
  const { rows } =
    limit === 0
      ? { rows: [] as Row[] }
      : await q.query<Row>(
          `${selectUser} WHERE ${cond} ORDER BY u.created_at, u.id OFFSET $${params.length + 1} LIMIT $${params.length + 2}`,
          [...params, offset, limit],
        );
  return { total: Number(count[0]?.n ?? 0), users: rows.map(toUser) };
}

/** The live members holding `role`, by userName. */
export async function staffWithRole(
  q: Queryable,
  tenantId: string,
  role: StaffRole,
): Promise<{ id: string; userName: string }[]> {
  const { rows } = await q.query<{ id: string; user_name: string }>(
    `SELECT u.id, u.user_name FROM staff_user_roles r JOIN staff_users u ON u.tenant_id = r.tenant_id AND u.id = r.user_id
     WHERE r.tenant_id = $1 AND r.role = $2 AND u.deleted_at IS NULL ORDER BY u.user_name`,
    [tenantId, role],
  );
  return rows.map((r) => ({ id: r.id, userName: r.user_name }));
}

/** Add or remove one role of one member (caller's transaction); true when something changed. */
export async function changeStaffRole(
  q: Queryable,
  tenantId: string,
  userId: string,
  role: StaffRole,
  member: boolean,
): Promise<boolean> {
  // Not a UUID: no member (as staffUserById reads it), not a uuid cast error.
  if (!uuidText.test(userId)) return false;
  await lockMembers(q, tenantId, [userId]);
  const { rowCount } = member
    ? await q.query(
        'INSERT INTO staff_user_roles (tenant_id, user_id, role) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
        [tenantId, userId, role],
      )
    : await q.query('DELETE FROM staff_user_roles WHERE tenant_id = $1 AND user_id = $2 AND role = $3', [
        tenantId,
        userId,
        role,
      ]);
  return (rowCount ?? 0) > 0;
}

/**
 * Remove many (member, role) pairs in one statement (caller's transaction; the staff_user_roles
 * row trigger still tells the edges per member). Returns the pairs that were there to remove.
 */
export async function removeStaffRoles(
  q: Queryable,
  tenantId: string,
  pairs: readonly { userId: string; role: StaffRole }[],
): Promise<{ userId: string; role: string }[]> {
  const members = pairs.filter((p) => uuidText.test(p.userId));
  if (members.length === 0) return [];
  await lockMembers(
    q,
    tenantId,
    members.map((p) => p.userId),
  );
  const { rows } = await q.query<{ user_id: string; role: string }>(
    `DELETE FROM staff_user_roles r USING unnest($2::uuid[], $3::text[]) AS p(user_id, role)
     WHERE r.tenant_id = $1 AND r.user_id = p.user_id AND r.role = p.role
     RETURNING r.user_id, r.role`,
    [tenantId, members.map((p) => p.userId), members.map((p) => p.role)],
  );
  return rows.map((r) => ({ userId: r.user_id, role: r.role }));
}

export interface GroupMapping {
  idpGroup: string;
  role: StaffRole;
}

/** The tenant's identity-provider group → role mapping, by group name. */
export async function groupMappings(q: Queryable, tenantId: string): Promise<GroupMapping[]> {
  const { rows } = await q.query<{ idp_group: string; role: string }>(
    'SELECT idp_group, role FROM staff_group_mappings WHERE tenant_id = $1 ORDER BY idp_group, role',
    [tenantId],
  );
  return rows.flatMap((r) => (isStaffRole(r.role) ? [{ idpGroup: r.idp_group, role: r.role }] : []));
}

/** Replace the tenant's whole mapping (caller's transaction). */
export async function putGroupMappings(
  q: Queryable,
  tenantId: string,
  mappings: readonly GroupMapping[],
): Promise<void> {
  await q.query('DELETE FROM staff_group_mappings WHERE tenant_id = $1', [tenantId]);
  if (mappings.length === 0) return;
  await q.query(
    `INSERT INTO staff_group_mappings (tenant_id, idp_group, role) SELECT $1, g, r FROM unnest($2::text[], $3::text[]) AS m(g, r) ON CONFLICT DO NOTHING`,
    [tenantId, mappings.map((m) => m.idpGroup), mappings.map((m) => m.role)],
  );
}
