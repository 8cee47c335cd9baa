/**
 * SCIM Users (issue 14 item 1): the service functions the `/scim/v2/Users` routes and the demo
 * seed both call, so the seed provisions staff through the same path as an identity provider.
 * Every mutation is one transaction with its audit record naming the SCIM credential
 * (`scim-credential:<id>`); deprovisioning (`active` to false, or DELETE) revokes the member's
 * sessions in that same transaction, and the sessions trigger tells the edges.
 */
import { appendAudit } from '../../../shared/audit.ts';
import type { Db, TxClient } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import {
  StaffUserNameTaken,
  insertStaffUser,
  listStaffUsers,
  lockStaffUser,
  revokeStaffSessions,
  staffRoleGroups,
  staffUserById,
  tombstoneStaffUser,
  updateStaffUser,
  type StaffUser,
  type StaffUserFields,
} from '../store.ts';
import { parseFilter, userFilterSql } from './filter.ts';
import { roleGroupId } from './groups.ts';
import {
  applyPatch,
  etagOfVersion,
  fieldsFromScim,
  listSchema,
  patchOpsOf,
  project,
  toScimUser,
} from './resource.ts';

export interface ScimDeps {
  db: Db;
  now: () => number;
  /** Where `meta.location` points (the public `/scim/v2` base). */
  baseUrl: string;
  /**
   * Called in the creating transaction once a member is provisioned (POST, or the seed): the
   * hook for what follows a joiner, such as sending a passkey enrolment link (issue 16).
   */
  /**
   * Called in the transaction that provisions a member (issue 16: the passkey enrolment link);
   * what it returns is shown once in the 201 answer, as the extension `enrolmentExtension`.
   */
  onProvisioned?: (q: TxClient, user: StaffUser, actor: string) => Promise<Record<string, unknown> | void>;
}

/** Who acts: the SCIM credential's principal id, `scim-credential:<id>`. */
export interface ScimActor {
  tenantId: string;
  principalId: string;
  requestId: string;
  ip: string | undefined;
}

/** SCIM paging (RFC 7644 section 3.4.2.4): 1-based startIndex; count capped. */
export const maxPageSize = 200;

const notFound = (id: string) => new AppError('SCIM_NOT_FOUND', `User ${id} not found`);

function groupsOf(u: StaffUser): { id: string; display: string }[] {
  return Object.entries(staffRoleGroups)
    .filter(([, r]) => u.roles.includes(r))
    .map(([display, r]) => ({ id: roleGroupId(u.tenantId, r), display }));
}

export const userView = (deps: ScimDeps, u: StaffUser) => toScimUser(u, deps.baseUrl, groupsOf(u));

/** RFC 7644 section 3.14: a stale If-Match is 412. */
export function checkVersion(ifMatch: string | undefined, current: string): void {
  if (ifMatch === undefined) return;
  const tags = ifMatch.split(',').map((t) => t.trim());
  if (!tags.includes('*') && !tags.includes(current))
    throw new AppError('PRECONDITION_FAILED', 'the resource changed since it was read (If-Match)');
}

async function audit(
  q: TxClient,
  deps: ScimDeps,
  a: ScimActor,
  action: string,
  userId: string,
  attrs: Record<string, unknown>,
): Promise<void> {
  await appendAudit(q, [
    {
      tenantId: a.tenantId,
      actor: { type: 'service', id: a.principalId },
      action,
      target: { type: 'staff_user', id: userId },
      decision: { allow: true },
      attrs: { requestId: a.requestId, ip: a.ip ?? '', ...attrs },
      ts: new Date(deps.now()),
    },
  ]);
}

/** What an audit record says changed (never the attribute values: they are personal data). */
function changed(before: StaffUser | undefined, after: StaffUserFields): Record<string, unknown> {
  return {
    userName: after.userName,
    active: after.active,
    ...(before ? { activeBefore: before.active, userNameBefore: before.userName } : {}),
  };
}

async function deprovisionIfInactive(
  q: TxClient,
  deps: ScimDeps,
  a: ScimActor,
  before: StaffUser | undefined,
  after: StaffUser,
  reason: string,
): Promise<void> {
  if (after.active || (before && !before.active)) return;
  const revoked = await revokeStaffSessions(q, a.tenantId, after.id, reason, deps.now());
  await audit(q, deps, a, 'staff.deprovision', after.id, { reason, sessionsRevoked: revoked });
}

function taken(err: unknown): never {
  if (err instanceof StaffUserNameTaken) throw new AppError('SCIM_UNIQUENESS', 'userName is already taken');
  throw err;
}

/** The SCIM extension URN under which a new member's one-time enrolment link is shown (201 only). */
export const enrolmentExtension = 'urn:ietf:params:scim:schemas:extension:payments:2.0:Enrolment';

export async function createUser(
  deps: ScimDeps,
  a: ScimActor,
  body: unknown,
): Promise<StaffUser & { provisioned?: Record<string, unknown> }> {
  const fields = fieldsFromScim(body);
  return deps.db.tx(async (q) => {
    const user = await insertStaffUser(q, a.tenantId, uuidv7(deps.now()), fields, deps.now()).catch(taken);
    await audit(q, deps, a, 'staff.provision', user.id, changed(undefined, fields));
    const provisioned = await deps.onProvisioned?.(q, user, a.principalId);
    return provisioned ? { ...user, provisioned } : user;
  });
}

export async function getUser(deps: ScimDeps, tenantId: string, id: string): Promise<StaffUser> {
  const u = await staffUserById(deps.db, tenantId, id);
  if (!u || u.deletedAt) throw notFound(id);
  return u;
}

export async function listUsers(
  deps: ScimDeps,
  tenantId: string,
  query: {
    filter?: string;
    startIndex?: number;
    count?: number;
    attributes?: string;
    excludedAttributes?: string;
  },
) {
  // $1 is the tenant (listStaffUsers): the filter's parameters start at $2.
  const params: unknown[] = [tenantId];
  const where =
    query.filter === undefined
      ? undefined
      : { sql: userFilterSql(parseFilter(query.filter), params), params: params.slice(1) };
  const start = Math.max(1, query.startIndex ?? 1);
  const count = Math.min(maxPageSize, Math.max(0, query.count ?? 100));
  const { total, users } = await listStaffUsers(deps.db, tenantId, where, start - 1, count);
  return {
    schemas: [listSchema],
    totalResults: total,
    startIndex: start,
    itemsPerPage: users.length,
    Resources: users.map((u) => project(userView(deps, u), query.attributes, query.excludedAttributes)),
  };
}

/** Shared by PUT and PATCH: lock, check the version, write, deprovision when deactivated. */
async function rewrite(
  deps: ScimDeps,
  a: ScimActor,
  id: string,
  ifMatch: string | undefined,
  next: (u: StaffUser) => StaffUserFields,
  action: string,
): Promise<StaffUser> {
  return deps.db.tx(async (q) => {
    const before = await lockStaffUser(q, a.tenantId, id);
    if (!before) throw notFound(id);
    checkVersion(ifMatch, etagOfVersion(before.version));
    const fields = next(before);
    const after = await updateStaffUser(q, a.tenantId, id, fields, deps.now()).catch(taken);
    await audit(q, deps, a, action, id, changed(before, fields));
    await deprovisionIfInactive(q, deps, a, before, after, 'scim_deactivated');
    return after;
  });
}

export function replaceUser(
  deps: ScimDeps,
  a: ScimActor,
  id: string,
  body: unknown,
  ifMatch?: string,
): Promise<StaffUser> {
  return rewrite(deps, a, id, ifMatch, (u) => fieldsFromScim(body, u), 'staff.replace');
}

export function patchUser(
  deps: ScimDeps,
  a: ScimActor,
  id: string,
  body: unknown,
  ifMatch?: string,
): Promise<StaffUser> {
  const ops = patchOpsOf(body);
  return rewrite(
    deps,
    a,
    id,
    ifMatch,
    (u) => {
      const resource = userView(deps, u);
      for (const op of ops) applyPatch(resource, op);
      // Read-only attributes the representation carried are not the client's: drop them before re-reading.
      delete resource.meta;
      delete resource.groups;
      return fieldsFromScim(resource, u);
    },
    'staff.patch',
  );
}

export async function deleteUser(deps: ScimDeps, a: ScimActor, id: string, ifMatch?: string): Promise<void> {
  await deps.db.tx(async (q) => {
    const before = await lockStaffUser(q, a.tenantId, id);
    if (!before) throw notFound(id);
    checkVersion(ifMatch, etagOfVersion(before.version));
    await tombstoneStaffUser(q, a.tenantId, id, deps.now());
    const revoked = await revokeStaffSessions(q, a.tenantId, id, 'scim_deleted', deps.now());
    await audit(q, deps, a, 'staff.delete', id, { userName: before.userName, sessionsRevoked: revoked });
  });
}
