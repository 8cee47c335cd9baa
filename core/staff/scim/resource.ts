/**
 * SCIM User resources (RFC 7643 section 4.1) and staff members: the wire shape, the checks on a
 * client's body, and PATCH operations (RFC 7644 section 3.5.2) applied to the wire shape.
 * Attributes other than userName, externalId, displayName and active are kept as written
 * (`staff_users.attributes`); `password` is never stored or echoed; `groups` is read-only
 * (membership changes through Groups).
 */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import { validate } from '../../http/validate.ts';
import type { StaffUser, StaffUserFields } from '../store.ts';
import { matches, parseFilter, userSchema, type Value } from './filter.ts';

export const enterpriseSchema = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
export const groupSchema = 'urn:ietf:params:scim:schemas:core:2.0:Group';
export const listSchema = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';
export const patchSchema = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const userSchemas = new Set([userSchema.toLowerCase(), enterpriseSchema.toLowerCase()]);

/** Attributes the service owns (RFC 7643 "readOnly"/"immutable"): a PATCH naming them is 400 mutability. */
const serverOwned = new Set(['id', 'meta', 'schemas', 'groups']);
/** Kept in columns, not in `attributes`. */
const columns = new Set(['username', 'externalid', 'displayname', 'active']);
/** Never stored: SCIM may send a password; staff sign in through their identity provider or passkeys. */
const neverStored = new Set(['password']);

const Str = (max: number) => Type.String({ minLength: 1, maxLength: max });
const UserBody = Type.Object(
  {
    schemas: Type.Array(Type.String({ maxLength: 200 }), { minItems: 1, maxItems: 8 }),
    id: Type.Optional(Type.String({ maxLength: 64 })),
    userName: Type.Optional(Str(256)),
    externalId: Type.Optional(Type.Union([Str(256), Type.Null()])),
    displayName: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    active: Type.Optional(Type.Boolean()),
    emails: Type.Optional(
      Type.Array(Type.Object({ value: Str(320) }, { additionalProperties: true }), { maxItems: 20 }),
    ),
  },
  { additionalProperties: true },
);

export const locationOf = (baseUrl: string, kind: 'Users' | 'Groups', id: string) =>
  `${baseUrl}/${kind}/${id}`;
export const etagOfVersion = (version: number | string) => `W/"${version}"`;

/** The wire representation of a member. */
export function toScimUser(
  u: StaffUser,
  baseUrl: string,
  groups: { id: string; display: string }[],
): Record<string, unknown> {
  const attrs = u.attributes;
  const schemas = [userSchema, ...(attrs[enterpriseSchema] !== undefined ? [enterpriseSchema] : [])];
  return {
    schemas,
    id: u.id,
    ...(u.externalId !== null ? { externalId: u.externalId } : {}),
    userName: u.userName,
    ...(u.displayName !== null ? { displayName: u.displayName } : {}),
    ...attrs,
    active: u.active,
    groups: groups.map((g) => ({
      value: g.id,
      display: g.display,
      $ref: locationOf(baseUrl, 'Groups', g.id),
      type: 'direct',
    })),
    meta: {
      resourceType: 'User',
      created: u.createdAt.toISOString(),
      lastModified: u.updatedAt.toISOString(),
      location: locationOf(baseUrl, 'Users', u.id),
      version: etagOfVersion(u.version),
    },
  };
}

/** Active may come as a string from some clients ("True"/"False": Azure AD's PATCH). */
function activeOf(v: unknown): unknown {
  if (typeof v === 'string' && /^(true|false)$/i.test(v)) return v.toLowerCase() === 'true';
  return v;
}

/** Refuse a body naming a schema we do not serve (issue 14: unknown schema). */
function checkSchemas(schemas: readonly string[], body: Record<string, unknown>): void {
  const lowered = schemas.map((s) => s.toLowerCase());
  const unknown = schemas.filter((s) => !userSchemas.has(s.toLowerCase()));
  if (unknown.length > 0) throw new AppError('SCIM_INVALID_SYNTAX', `unknown schema ${unknown.join(', ')}`);
  if (!lowered.includes(userSchema.toLowerCase()))
    throw new AppError('SCIM_INVALID_SYNTAX', `schemas must include ${userSchema}`);
  for (const k of Object.keys(body)) {
    if (k.toLowerCase().startsWith('urn:') && !userSchemas.has(k.toLowerCase()))
      throw new AppError('SCIM_INVALID_SYNTAX', `unknown schema extension ${k}`);
  }
}

/**
 * A client's User body (POST, PUT, or the result of a PATCH) as store fields. `existingId`:
 * for PUT and PATCH, an `id` in the body must be that id (immutable).
 */
export function fieldsFromScim(raw: unknown, existing?: StaffUser): StaffUserFields {
  if (raw && typeof raw === 'object' && !Array.isArray(raw) && 'active' in raw) {
    (raw as Record<string, unknown>).active = activeOf((raw as Record<string, unknown>).active);
  }
  const body = validate(UserBody, raw, 'body');
  checkSchemas(body.schemas, body);
  if (existing && body.id !== undefined && body.id !== existing.id)
    throw new AppError('SCIM_MUTABILITY', 'id is immutable');
  if (body.userName === undefined || body.userName.trim() === '')
    throw new AppError('SCIM_INVALID_VALUE', 'userName is required');
  const attributes: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body)) {
    const lower = k.toLowerCase();
    if (
      serverOwned.has(lower) ||
      columns.has(lower) ||
      neverStored.has(lower) ||
      v === undefined ||
      v === null
    )
      continue;
    attributes[lower === enterpriseSchema.toLowerCase() ? enterpriseSchema : k] = v;
  }
  return {
    userName: body.userName,
    externalId: body.externalId ?? null,
    displayName:
      body.displayName === undefined || body.displayName === null || body.displayName === ''
        ? null
        : body.displayName,
    attributes,
    active: body.active ?? true,
  };
}

// --- PATCH (RFC 7644 section 3.5.2) ---------------------------------------------------------

const PatchBody = Type.Object(
  {
    schemas: Type.Array(Type.String({ maxLength: 200 }), { minItems: 1, maxItems: 2 }),
    Operations: Type.Array(
      Type.Object(
        {
          op: Type.String({ maxLength: 10 }),
          path: Type.Optional(Type.String({ minLength: 1, maxLength: 500 })),
          value: Type.Optional(Type.Unknown()),
        },
        { additionalProperties: true },
      ),
      { minItems: 1, maxItems: 100 },
    ),
  },
  { additionalProperties: true },
);

export type PatchOp = { op: 'add' | 'replace' | 'remove'; path: string | undefined; value: unknown };

/** The operations of a PatchOp body; anything else is 400 invalidSyntax or invalidValue. */
export function patchOpsOf(raw: unknown): PatchOp[] {
  const body = validate(PatchBody, raw, 'body');
  if (!body.schemas.some((s) => s.toLowerCase() === patchSchema.toLowerCase()) || body.schemas.length !== 1) {
    throw new AppError('SCIM_INVALID_SYNTAX', `schemas must be [${patchSchema}]`);
  }
  return body.Operations.map((o) => {
    const op = o.op.toLowerCase();
    if (op !== 'add' && op !== 'replace' && op !== 'remove')
      throw new AppError('SCIM_INVALID_SYNTAX', `unknown op ${o.op}`);
    if (op === 'remove' && o.path === undefined) throw new AppError('SCIM_NO_TARGET', 'remove needs a path');
    if (op !== 'remove' && o.value === undefined)
      throw new AppError('SCIM_INVALID_VALUE', `${op} needs a value`);
    return { op, path: o.path, value: o.value };
  });
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The key of `obj` matching `name` case-insensitively, or `name` itself. */
function keyOf(obj: Obj, name: string): string {
  return Object.keys(obj).find((k) => k.toLowerCase() === name.toLowerCase()) ?? name;
}

interface Path {
  container: string[];
  attr: string;
  filter: string | undefined;
  sub: string | undefined;
}

/** `attr`, `attr.sub`, `attr[filter]`, `attr[filter].sub`, optionally behind a schema URN. */
function parsePath(path: string): Path {
  let rest = path;
  const container: string[] = [];
  const lower = path.toLowerCase();
  if (lower.startsWith(`${enterpriseSchema.toLowerCase()}:`)) {
    container.push(enterpriseSchema);
    rest = path.slice(enterpriseSchema.length + 1);
  } else if (lower.startsWith(`${userSchema.toLowerCase()}:`)) {
    rest = path.slice(userSchema.length + 1);
  } else if (lower === enterpriseSchema.toLowerCase()) {
    return { container: [], attr: enterpriseSchema, filter: undefined, sub: undefined };
  } else if (lower.startsWith('urn:')) {
    throw new AppError('SCIM_INVALID_PATH', `unknown schema in path ${path}`);
  }
  const m = /^([A-Za-z][A-Za-z0-9_$-]*)(?:\[(.+)\])?(?:\.([A-Za-z][A-Za-z0-9_$-]*))?$/.exec(rest);
  if (!m) throw new AppError('SCIM_INVALID_PATH', `malformed path ${path}`);
  return { container, attr: m[1] as string, filter: m[2], sub: m[3] };
}

function refuseServerOwned(name: string): void {
  if (serverOwned.has(name.toLowerCase()))
    throw new AppError('SCIM_MUTABILITY', `${name} cannot be modified`);
}

function elementGetter(el: unknown): (attr: string) => Value[] | undefined {
  return (attr) => {
    if (!isObj(el)) return [];
    const v = el[keyOf(el, attr)];
    return v === undefined ? [] : [typeof v === 'object' ? JSON.stringify(v) : (v as Value)];
  };
}

/** Merge `value` into `target[key]` for add (arrays append, objects merge) or set it for replace. */
function put(target: Obj, name: string, value: unknown, op: 'add' | 'replace'): void {
  const key = keyOf(target, name);
  const cur = target[key];
  if (op === 'add' && Array.isArray(cur)) {
    const more = Array.isArray(value) ? value : [value];
    const seen = new Set(cur.map((x) => JSON.stringify(x)));
    target[key] = [...cur, ...more.filter((x) => !seen.has(JSON.stringify(x)))];
  } else if (isObj(cur) && isObj(value)) {
    target[key] = { ...cur, ...value };
  } else {
    target[key] = value;
  }
}

/** Apply one operation to a wire-shaped User (mutated in place). */
export function applyPatch(resource: Obj, o: PatchOp): void {
  if (o.path === undefined) {
    if (!isObj(o.value)) throw new AppError('SCIM_INVALID_VALUE', `${o.op} without a path takes an object`);
    for (const [k, v] of Object.entries(o.value)) {
      if (
        k.toLowerCase().startsWith('urn:') &&
        isObj(v) &&
        k.toLowerCase() !== enterpriseSchema.toLowerCase()
      ) {
        // A value keyed by the core schema URN carries core attributes.
        if (k.toLowerCase() !== userSchema.toLowerCase())
          throw new AppError('SCIM_INVALID_SYNTAX', `unknown schema extension ${k}`);
        for (const [k2, v2] of Object.entries(v)) applyPatch(resource, { op: o.op, path: k2, value: v2 });
        continue;
      }
      applyPatch(resource, { op: o.op, path: k, value: v });
    }
    return;
  }
  const p = parsePath(o.path);
  refuseServerOwned(p.attr);
  let target: Obj = resource;
  for (const c of p.container) {
    const k = keyOf(target, c);
    if (!isObj(target[k])) {
      if (o.op === 'remove') return;
      target[k] = {};
    }
    target = target[k] as Obj;
  }
  const key = keyOf(target, p.attr);
  if (p.filter === undefined) {
    if (p.sub === undefined) {
      if (o.op === 'remove') delete target[key];
      else put(target, p.attr, p.attr.toLowerCase() === 'active' ? activeOf(o.value) : o.value, o.op);
      return;
    }
    if (target[key] !== undefined && !isObj(target[key]))
      throw new AppError('SCIM_INVALID_PATH', `${p.attr} has no sub-attributes`);
    const inner = (target[key] ??= {}) as Obj;
    if (o.op === 'remove') delete inner[keyOf(inner, p.sub)];
    else put(inner, p.sub, o.value, o.op);
    return;
  }
  // attr[filter](.sub): the matching elements of a multi-valued attribute.
  const list = target[key];
  const filter = (() => {
    try {
      return parseFilter(p.filter);
    } catch {
      throw new AppError('SCIM_INVALID_PATH', `malformed value filter in ${o.path}`);
    }
  })();
  const elements = Array.isArray(list) ? list : [];
  const hit = elements.filter((el) => matches(filter, elementGetter(el)));
  if (hit.length === 0) {
    if (o.op === 'remove') return;
    if (o.op === 'replace')
      throw new AppError('SCIM_NO_TARGET', `no element of ${p.attr} matches ${p.filter}`);
  }
  if (o.op === 'remove') {
    if (p.sub === undefined) target[key] = elements.filter((el) => !hit.includes(el));
    else for (const el of hit) if (isObj(el)) delete el[keyOf(el, p.sub)];
    return;
  }
  for (const el of hit) {
    if (!isObj(el)) continue;
    if (p.sub !== undefined) el[keyOf(el, p.sub)] = o.value;
    else if (isObj(o.value)) Object.assign(el, o.value);
  }
}

// --- attributes / excludedAttributes (RFC 7644 section 3.9) ---------------------------------

/** A requested attribute as [container key or undefined, attribute, sub-attribute or undefined]. */
function attrRef(name: string): [string, string | undefined] {
  let n = name.trim();
  if (n.toLowerCase().startsWith(`${userSchema.toLowerCase()}:`)) n = n.slice(userSchema.length + 1);
  if (n.toLowerCase().startsWith(`${enterpriseSchema.toLowerCase()}:`))
    return [enterpriseSchema, n.slice(enterpriseSchema.length + 1)];
  const [top = '', sub] = n.split('.');
  return [top, sub];
}

function pick(value: unknown, sub: string): unknown {
  if (Array.isArray(value))
    return value.map((el) => (isObj(el) ? { [keyOf(el, sub)]: el[keyOf(el, sub)] } : el));
  return isObj(value) ? { [keyOf(value, sub)]: value[keyOf(value, sub)] } : undefined;
}

/**
 * A representation limited to `attributes`, or without `excludedAttributes` (comma-separated);
 * `id` and `schemas` are always returned (RFC 7643 "returned: always").
 */
export function project(resource: Obj, attributes: string | undefined, excluded: string | undefined): Obj {
  const list = (s: string | undefined) =>
    (s ?? '')
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean);
  const wanted = list(attributes);
  if (wanted.length > 0) {
    const out: Obj = { schemas: resource.schemas, id: resource.id };
    for (const name of wanted) {
      const [top, sub] = attrRef(name);
      const key = keyOf(resource, top);
      if (resource[key] === undefined) continue;
      if (sub === undefined) {
        out[key] = resource[key];
      } else {
        const part = pick(resource[key], sub);
        out[key] = isObj(out[key]) && isObj(part) ? { ...out[key], ...part } : part;
      }
    }
    return out;
  }
  const out: Obj = JSON.parse(JSON.stringify(resource)) as Obj;
  for (const name of list(excluded)) {
    const [top, sub] = attrRef(name);
    const key = keyOf(out, top);
    if (key === 'id' || key === 'schemas') continue;
    if (sub === undefined) delete out[key];
    else if (isObj(out[key])) delete (out[key] as Obj)[keyOf(out[key] as Obj, sub)];
  }
  return out;
}
