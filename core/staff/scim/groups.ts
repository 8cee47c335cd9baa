/**
 * SCIM Groups (issue 14 item 1; DESIGN "People and machines"): a tenant's groups are its seven
 * staff roles (Admin, Ops, ReadOnly, support, fraud, compliance, PolicyAuthor), each with an id derived from
 * tenant and role so it is stable across restarts and databases. Membership is role membership.
 *
 * An identity provider's own group names reach roles through the tenant's mapping
 * (`staff_group_mappings`, administered at `/v1/staff/group-mappings`). Decision: a mapped name
 * is an alias of its role group. `filter=displayName eq "<idp name>"` finds the role group it
 * maps to, and a POST of a mapped name answers 201 with that role group (and adds the members
 * it names), so a provider that pushes its own groups links them to roles. A name mapped to
 * several roles, or to none, is refused 400 invalidValue (map it first); a role group's own name
 * is 409 uniqueness (it already exists); role groups are never renamed or deleted (400 mutability).
 */
import { createHash } from 'node:crypto';
import { appendAudit } from '../../../shared/audit.ts';
import type { Queryable, TxClient } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import {
  changeStaffRole,
  forgetIdpRolesOf,
  lockGroupMappings,
  groupMappings,
  staffRoleGroups,
  staffUserById,
  staffWithRole,
  type GroupMapping,
  type StaffRole,
} from '../store.ts';
import { matches, normaliseAttr, parseFilter, type Value } from './filter.ts';
import { groupSchema, listSchema, locationOf, patchOpsOf, type PatchOp } from './resource.ts';
import { checkVersion, maxPageSize, type ScimActor, type ScimDeps } from './users.ts';

/** A stable UUID-shaped id for a tenant's role group (name-based, as RFC 4122 version 5 ids are). */
export function roleGroupId(tenantId: string, role: StaffRole): string {
  const h = createHash('sha256').update(`scim-group\u0000${tenantId}\u0000${role}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${((parseInt(h.slice(16, 17), 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

const roleEntries = Object.entries(staffRoleGroups) as [string, StaffRole][];

interface RoleGroup {
  id: string;
  displayName: string;
  role: StaffRole;
  aliases: string[];
  members: { id: string; userName: string }[];
}

async function roleGroups(q: Queryable, tenantId: string): Promise<RoleGroup[]> {
  const mappings = await groupMappings(q, tenantId);
  // One query at a time: `q` may be a transaction's client.
  const out: RoleGroup[] = [];
  for (const [displayName, role] of roleEntries) {
    out.push({
      id: roleGroupId(tenantId, role),
      displayName,
      role,
      aliases: mappings.filter((m) => m.role === role).map((m) => m.idpGroup),
      members: await staffWithRole(q, tenantId, role),
    });
  }
  return out;
}

/**
 * A Group's ETag: a hash of what changes in its representation. The id and displayName are fixed
 * per role; the members are, each with its userName (the `display` the view shows), so a member
 * renamed through /Users makes a held copy stale as an added or removed member does (RFC 7644
 * 3.14: the version changes whenever the resource does).
 */
function versionOf(g: RoleGroup): string {
  return `W/"${createHash('sha256')
    .update(JSON.stringify(g.members.map((m) => [m.id, m.userName])))
    .digest('base64url')
    .slice(0, 16)}"`;
}

function view(deps: ScimDeps, g: RoleGroup): Record<string, unknown> {
  return {
    schemas: [groupSchema],
    id: g.id,
    displayName: g.displayName,
    members: g.members.map((m) => ({
      value: m.id,
      display: m.userName,
      $ref: locationOf(deps.baseUrl, 'Users', m.id),
      type: 'User',
    })),
    meta: {
      resourceType: 'Group',
      location: locationOf(deps.baseUrl, 'Groups', g.id),
      version: versionOf(g),
    },
  };
}

const notFound = (id: string) => new AppError('SCIM_NOT_FOUND', `Group ${id} not found`);

async function groupById(q: Queryable, tenantId: string, id: string): Promise<RoleGroup> {
  const g = (await roleGroups(q, tenantId)).find((x) => x.id === id.toLowerCase());
  if (!g) throw notFound(id);
  return g;
}

export async function listGroups(
  deps: ScimDeps,
  tenantId: string,
  query: { filter?: string; startIndex?: number; count?: number; excludedAttributes?: string },
) {
  const filter = query.filter === undefined ? undefined : parseFilter(query.filter);
  const all = await roleGroups(deps.db, tenantId);
  const hit =
    filter === undefined
      ? all
      : all.filter((g) =>
          matches(filter, (attr): Value[] | undefined => {
            switch (normaliseAttr(attr, groupSchema)) {
              case 'id':
                return [g.id];
              case 'displayname':
                return [g.displayName, ...g.aliases];
              case 'externalid':
                return [];
              case 'members':
              case 'members.value':
                return g.members.map((m) => m.id);
              case 'members.display':
                return g.members.map((m) => m.userName);
              default:
                return undefined;
            }
          }),
        );
  const start = Math.max(1, query.startIndex ?? 1);
  const count = Math.min(maxPageSize, Math.max(0, query.count ?? 100));
  const page = hit.slice(start - 1, start - 1 + count);
  const withoutMembers = (query.excludedAttributes ?? '')
    .toLowerCase()
    .split(',')
    .map((s) => s.trim())
    .includes('members');
  return {
    schemas: [listSchema],
    totalResults: hit.length,
    startIndex: start,
    itemsPerPage: page.length,
    Resources: page.map((g) => {
      const v = view(deps, g);
      if (withoutMembers) delete v.members;
      return v;
    }),
  };
}

export async function getGroup(deps: ScimDeps, tenantId: string, id: string) {
  const g = await groupById(deps.db, tenantId, id);
  return { body: view(deps, g), version: versionOf(g) };
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function memberIds(v: unknown): string[] {
  const list = Array.isArray(v) ? v : v === undefined ? [] : [v];
  return list.map((m) => {
    if (!isObj(m) || typeof m.value !== 'string')
      throw new AppError('SCIM_INVALID_VALUE', 'members are objects with a value (a User id)');
    return m.value.toLowerCase();
  });
}

function checkName(g: RoleGroup, name: unknown): void {
  if (name !== undefined && name !== g.displayName)
    throw new AppError('SCIM_MUTABILITY', `role group ${g.displayName} cannot be renamed`);
}

/** The member set after the operations of a Groups PATCH (RFC 7644 section 3.5.2). */
/** The members after `ops`, and those an add or replace names (SCIM asserts their role). */
function patchedMembers(g: RoleGroup, ops: PatchOp[]): { members: Set<string>; asserted: Set<string> } {
  const members = new Set(g.members.map((m) => m.id));
  const asserted = new Set<string>();
  const apply = (op: PatchOp['op'], ids: string[]) => {
    applyMembers(members, op, ids);
    if (op !== 'remove') for (const id of ids) asserted.add(id);
  };
  for (const o of ops) {
    const path = o.path?.replace(/^urn:ietf:params:scim:schemas:core:2\.0:Group:/i, '');
    if (path === undefined) {
      if (!isObj(o.value)) throw new AppError('SCIM_INVALID_VALUE', `${o.op} without a path takes an object`);
      for (const k of Object.keys(o.value)) {
        const lower = k.toLowerCase();
        if (lower === 'displayname') checkName(g, o.value[k]);
        else if (lower === 'members') apply(o.op, memberIds(o.value[k]));
        else if (lower === 'id' || lower === 'meta' || lower === 'externalid')
          throw new AppError('SCIM_MUTABILITY', `${k} cannot be modified`);
        else throw new AppError('SCIM_INVALID_PATH', `Groups have no attribute ${k}`);
      }
      continue;
    }
    const m = /^members(?:\[(.+)\])?$/i.exec(path);
    if (path.toLowerCase() === 'displayname') {
      checkName(g, o.op === 'remove' ? null : o.value);
    } else if (m && m[1] !== undefined) {
      if (o.op !== 'remove')
        throw new AppError('SCIM_INVALID_PATH', 'a members filter path takes remove only');
      const filter = parseFilter(m[1]);
      for (const id of [...members])
        if (matches(filter, (a) => (a.toLowerCase() === 'value' ? [id] : []))) members.delete(id);
    } else if (m) {
      apply(o.op, o.op === 'remove' && o.value === undefined ? [...members] : memberIds(o.value));
    } else if (/^(id|meta|externalId)$/i.test(path)) {
      throw new AppError('SCIM_MUTABILITY', `${path} cannot be modified`);
    } else {
      throw new AppError('SCIM_INVALID_PATH', `Groups have no attribute ${path}`);
    }
  }
  return { members, asserted };
}

function applyMembers(members: Set<string>, op: PatchOp['op'], ids: string[]): void {
  if (op === 'replace') members.clear();
  for (const id of ids) {
    if (op === 'remove') members.delete(id);
    else members.add(id);
  }
}

/**
 * Make `wanted` the role's members: add and remove roles, each audited naming the credential.
 * `asserted`: the members this request names (a PATCH's add or replace, a PUT's list).
 */
async function setMembers(
  q: TxClient,
  deps: ScimDeps,
  a: ScimActor,
  g: RoleGroup,
  { members: wanted, asserted }: { members: Set<string>; asserted: Set<string> },
): Promise<void> {
  const current = new Set(g.members.map((m) => m.id));
  for (const id of wanted) {
    if (current.has(id)) continue;
    const u = await staffUserById(q, a.tenantId, id);
    if (!u || u.deletedAt)
      throw new AppError('SCIM_INVALID_VALUE', `member ${id} is not a User of this tenant`);
  }
  const changes: [string, boolean][] = [
    ...[...wanted].filter((id) => !current.has(id)).map((id): [string, boolean] => [id, true]),
    ...[...current].filter((id) => !wanted.has(id)).map((id): [string, boolean] => [id, false]),
  ];
  for (const [userId, member] of changes) {
    await changeStaffRole(q, a.tenantId, userId, g.role, member);
    await appendAudit(q, [
      {
        tenantId: a.tenantId,
        actor: { type: 'service', id: a.principalId },
        action: member ? 'staff.role_add' : 'staff.role_remove',
        target: { type: 'staff_user', id: userId },
        decision: { allow: true },
        attrs: { requestId: a.requestId, ip: a.ip ?? '', role: g.role, group: g.id },
        ts: new Date(deps.now()),
      },
    ]);
  }
  // A role SCIM names is SCIM's, not the last sign-in's, whether this request granted it or the
  // member already held it from a mapped IdP group: a mapping removed later leaves it (issue 16).
  const claimed = [...asserted].filter((id) => wanted.has(id)).map((userId) => ({ userId, role: g.role }));
  await forgetIdpRolesOf(q, a.tenantId, claimed);
}

async function lockRole(q: Queryable, tenantId: string, role: StaffRole): Promise<void> {
  // One writer per role group at a time: concurrent PATCHes compute against the same members.
  await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`scim-group:${tenantId}:${role}`]);
  // Then the mappings' lock (issue 16): a mapping change takes roles from many members in id
  // order and this write changes them in userName order, so unordered they could deadlock; and
  // the members read next are then those the change left.
  await lockGroupMappings(q, tenantId);
}

export async function patchGroup(deps: ScimDeps, a: ScimActor, id: string, body: unknown, ifMatch?: string) {
  const ops = patchOpsOf(body);
  return deps.db.tx(async (q) => {
    const found = await groupById(q, a.tenantId, id);
    await lockRole(q, a.tenantId, found.role);
    const g = await groupById(q, a.tenantId, id);
    checkVersion(ifMatch, versionOf(g));
    await setMembers(q, deps, a, g, patchedMembers(g, ops));
    const after = await groupById(q, a.tenantId, id);
    return { body: view(deps, after), version: versionOf(after) };
  });
}

export async function replaceGroup(
  deps: ScimDeps,
  a: ScimActor,
  id: string,
  body: unknown,
  ifMatch?: string,
) {
  if (
    !isObj(body) ||
    !Array.isArray(body.schemas) ||
    !body.schemas.some((s) => typeof s === 'string' && s.toLowerCase() === groupSchema.toLowerCase())
  ) {
    throw new AppError('SCIM_INVALID_SYNTAX', `schemas must include ${groupSchema}`);
  }
  return deps.db.tx(async (q) => {
    const found = await groupById(q, a.tenantId, id);
    await lockRole(q, a.tenantId, found.role);
    const g = await groupById(q, a.tenantId, id);
    checkVersion(ifMatch, versionOf(g));
    checkName(g, body.displayName);
    const listed = new Set(memberIds(body.members ?? []));
    await setMembers(q, deps, a, g, { members: listed, asserted: listed });
    const after = await groupById(q, a.tenantId, id);
    return { body: view(deps, after), version: versionOf(after) };
  });
}

/** POST /Groups: a mapped identity-provider group name links to its role group (see the module comment). */
export async function createGroup(deps: ScimDeps, a: ScimActor, body: unknown) {
  if (!isObj(body) || typeof body.displayName !== 'string' || body.displayName === '')
    throw new AppError('SCIM_INVALID_VALUE', 'displayName is required');
  if (
    !Array.isArray(body.schemas) ||
    !body.schemas.every((s) => typeof s === 'string' && s.toLowerCase() === groupSchema.toLowerCase())
  ) {
    throw new AppError('SCIM_INVALID_SYNTAX', `schemas must be [${groupSchema}]`);
  }
  const name = body.displayName;
  if (roleEntries.some(([n]) => n.toLowerCase() === name.toLowerCase()))
    throw new AppError('SCIM_UNIQUENESS', `group ${name} already exists`);
  return deps.db.tx(async (q) => {
    const roles = [
      ...new Set(
        (await groupMappings(q, a.tenantId))
          .filter((m: GroupMapping) => m.idpGroup === name)
          .map((m) => m.role),
      ),
    ];
    if (roles.length !== 1) {
      throw new AppError(
        'SCIM_INVALID_VALUE',
        roles.length === 0
          ? `group ${name} maps to no role: map it first (PUT /v1/staff/group-mappings)`
          : `group ${name} maps to several roles; a SCIM group must map to one`,
      );
    }
    const role = roles[0] as StaffRole;
    await lockRole(q, a.tenantId, role);
    const g = await groupById(q, a.tenantId, roleGroupId(a.tenantId, role));
    const listed = memberIds(body.members ?? []);
    const wanted = new Set([...g.members.map((m) => m.id), ...listed]);
    await setMembers(q, deps, a, g, { members: wanted, asserted: new Set(listed) });
    const after = await groupById(q, a.tenantId, g.id);
    return { body: view(deps, after), version: versionOf(after) };
  });
}
