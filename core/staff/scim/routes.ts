/**
 * `/scim/v2` (RFC 7643/7644; issue 14 item 1), served by core behind the edge. The edge
 * authenticated a SCIM bearer credential and set the tenant from it (x-tenant-id); nothing in
 * the path or body chooses the tenant. Answers and errors are `application/scim+json`.
 */
import { enrolmentExtension } from './users.ts';
import { Type, type TSchema } from '@sinclair/typebox';
import type { Db } from '../../../shared/db/pool.ts';
import { AppError, scimContentType } from '../../../shared/errors.ts';
import { ScimErrorSchema } from '../../http/responses.ts';
import { defineRoute, type Reply, type RequestContext, type RouteSpec } from '../../http/route.ts';
import { listOf, resourceTypes, schemas, serviceProviderConfig } from './discovery.ts';
import { createGroup, getGroup, listGroups, patchGroup, replaceGroup } from './groups.ts';
import type { StaffUser } from '../store.ts';
import { etagOfVersion, project } from './resource.ts';
import { declared } from '../../http/declared.ts';
import { noneMatch } from '../../http/conditional.ts';
import {
  ScimGroup,
  ScimGroupListed,
  ScimListResponse,
  ScimResourceType,
  ScimSchemaDocument,
  ScimServiceProviderConfig,
  ScimUser,
  ScimUserProjected,
} from './schemas.ts';
import {
  createUser,
  deleteUser,
  getUser,
  listUsers,
  patchUser,
  replaceUser,
  userView,
  type ScimActor,
  type ScimDeps,
} from './users.ts';

export const scimBasePath = '/scim/v2';
/** The edge's principal kind for a SCIM credential (x-credential) and the role it carries. */
export const scimCredentialKind = 'scim-credential';
export const scimRole = 'scim';

type Ctx = RequestContext<unknown, unknown, unknown>;

function actorOf(ctx: Ctx): ScimActor {
  const { tenantId, principalId, roles, credential, clientIp } = ctx.identity;
  if (!tenantId || !principalId || credential !== scimCredentialKind || !roles.includes(scimRole)) {
    throw new AppError('UNAUTHORIZED', 'a SCIM bearer credential is required');
  }
  return { tenantId, principalId, requestId: ctx.requestId, ip: clientIp };
}

function scim(status: number, body: unknown, etag?: string, location?: string): Reply {
  const headers: Record<string, string> = {};
  if (etag) headers.etag = etag;
  if (location) headers.location = location;
  return { status, headers, raw: { contentType: scimContentType, data: JSON.stringify(body) } };
}

const Id = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
const ListQuery = Type.Object(
  {
    filter: Type.Optional(Type.String({ maxLength: 1000 })),
    startIndex: Type.Optional(Type.Integer({ minimum: -2147483648, maximum: 2147483647 })),
    count: Type.Optional(Type.Integer({ minimum: -2147483648, maximum: 2147483647 })),
    attributes: Type.Optional(Type.String({ maxLength: 1000 })),
    excludedAttributes: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
);
const ProjectionQuery = Type.Object(
  {
    attributes: Type.Optional(Type.String({ maxLength: 1000 })),
    excludedAttributes: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
);
/** RFC 7644 section 3.4.3: a query in a POST body. */
const SearchBody = Type.Object(
  {
    schemas: Type.Array(Type.Literal('urn:ietf:params:scim:api:messages:2.0:SearchRequest'), {
      minItems: 1,
      maxItems: 1,
    }),
    filter: Type.Optional(Type.String({ maxLength: 1000 })),
    startIndex: Type.Optional(Type.Integer({ minimum: -2147483648, maximum: 2147483647 })),
    count: Type.Optional(Type.Integer({ minimum: -2147483648, maximum: 2147483647 })),
    attributes: Type.Optional(Type.Array(Type.String({ maxLength: 200 }), { maxItems: 50 })),
    excludedAttributes: Type.Optional(Type.Array(Type.String({ maxLength: 200 }), { maxItems: 50 })),
  },
  { additionalProperties: false },
);
const Body = Type.Unknown();
const ifMatchHeader = {
  name: 'If-Match',
  required: false,
  description: 'The ETag (meta.version) of a GET; a stale one is 412',
};
/** RFC 7644 3.14: a GET naming the current version answers 304 with the ETag and no body. */
const ifNoneMatchHeader = {
  name: 'If-None-Match',
  required: false,
  description: 'An ETag: 304 when unchanged',
};
const notModified = { description: 'Not modified' };
const ok = (description: string, schema: TSchema) => ({ description, schema, contentType: scimContentType });

type ScimOpts = { db: Db; now: () => number; onProvisioned?: ScimDeps['onProvisioned'] };

const tags = ['scim'];
// meta.location follows the address the client used (the gateway's, behind the edge).
const depsFor = (opts: ScimOpts, ctx: Ctx): ScimDeps => {
  const host = ctx.headers['x-forwarded-host'] ?? ctx.headers.host ?? 'localhost';
  const proto = ctx.headers['x-forwarded-proto'] ?? 'http';
  return {
    db: opts.db,
    now: opts.now,
    baseUrl: `${proto}://${host}${scimBasePath}`,
    ...(opts.onProvisioned ? { onProvisioned: opts.onProvisioned } : {}),
  };
};

const p = (s: string) => `${scimBasePath}${s}`;

type Write<T> = (deps: ScimDeps, a: ScimActor, id: string, body: unknown, ifMatch?: string) => Promise<T>;

const userWrite = (
  opts: ScimOpts,
  method: 'PUT' | 'PATCH',
  operationId: string,
  summary: string,
  fn: Write<StaffUser>,
) =>
  defineRoute({
    ...declared(method, p('/Users/{id}')),
    operationId,
    summary,
    tags,
    params: Id,
    body: Body,
    headers: [ifMatchHeader],
    responses: { 200: ok('The User', ScimUser) },
    handler: async (ctx) => {
      const deps = depsFor(opts, ctx);
      const u = await fn(deps, actorOf(ctx), ctx.params.id, ctx.body, ctx.headers['if-match']);
      return scim(200, userView(deps, u), etagOfVersion(u.version));
    },
  });

const groupWrite = (
  opts: ScimOpts,
  method: 'PUT' | 'PATCH',
  operationId: string,
  summary: string,
  fn: Write<{ body: unknown; version: string }>,
) =>
  defineRoute({
    ...declared(method, p('/Groups/{id}')),
    operationId,
    summary,
    tags,
    params: Id,
    body: Body,
    headers: [ifMatchHeader],
    responses: { 200: ok('The Group', ScimGroup) },
    handler: async (ctx) => {
      const g = await fn(depsFor(opts, ctx), actorOf(ctx), ctx.params.id, ctx.body, ctx.headers['if-match']);
      return scim(200, g.body, g.version);
    },
  });

/** `/<kind>` (a ListResponse) and `/<kind>/{id}` over one discovery document set. */
const discovery = (
  opts: ScimOpts,
  kind: string,
  one: string,
  docs: (baseUrl: string) => Record<string, unknown>,
  schema: TSchema,
) => [
  defineRoute({
    ...declared('GET', p(`/${kind}`)),
    operationId: `scim${kind}`,
    summary: `SCIM ${kind}`,
    tags,
    responses: { 200: ok('ListResponse', ScimListResponse(schema)) },
    handler: async (ctx) => {
      actorOf(ctx);
      return scim(200, listOf(Object.values(docs(depsFor(opts, ctx).baseUrl))));
    },
  }),
  defineRoute({
    ...declared('GET', p(`/${kind}/{id}`)),
    operationId: `scim${one}`,
    summary: `One SCIM ${one}`,
    tags,
    params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) }),
    responses: { 200: ok(one, schema) },
    handler: async (ctx) => {
      actorOf(ctx);
      const doc = docs(depsFor(opts, ctx).baseUrl)[ctx.params.id];
      if (!doc) throw new AppError('SCIM_NOT_FOUND', `${one} ${ctx.params.id} not found`);
      return scim(200, doc);
    },
  }),
];

const scimServiceProviderConfigRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('GET', p('/ServiceProviderConfig')),
    operationId: 'scimServiceProviderConfig',
    summary: 'SCIM service provider configuration',
    tags,
    responses: { 200: ok('RFC 7644 section 5', ScimServiceProviderConfig) },
    handler: async (ctx) => {
      actorOf(ctx);
      return scim(200, serviceProviderConfig(depsFor(opts, ctx).baseUrl));
    },
  });

const scimCreateUserRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('POST', p('/Users')),
    operationId: 'scimCreateUser',
    summary: 'Provision a staff member',
    tags,
    body: Body,
    responses: { 201: ok('The User', ScimUser) },
    handler: async (ctx) => {
      const deps = depsFor(opts, ctx);
      const u = await createUser(deps, actorOf(ctx), ctx.body);
      const v = userView(deps, u);
      // Issue 16 item 1: the member's passkey enrolment link, shown once to the provisioning client.
      if (u.provisioned) {
        v.schemas = [...(v.schemas as string[]), enrolmentExtension];
        v[enrolmentExtension] = u.provisioned;
      }
      return scim(201, v, etagOfVersion(u.version), (v.meta as { location: string }).location);
    },
  });

const scimListUsersRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('GET', p('/Users')),
    operationId: 'scimListUsers',
    summary: 'List staff members (filter, startIndex, count)',
    tags,
    query: ListQuery,
    responses: { 200: ok('ListResponse', ScimListResponse(ScimUserProjected)) },
    handler: async (ctx) => scim(200, await listUsers(depsFor(opts, ctx), actorOf(ctx).tenantId, ctx.query)),
  });

const scimSearchUsersRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('POST', p('/Users/.search')),
    operationId: 'scimSearchUsers',
    summary: 'List staff members with the query in the body',
    tags,
    body: SearchBody,
    responses: { 200: ok('ListResponse', ScimListResponse(ScimUserProjected)) },
    handler: async (ctx) => {
      const { filter, startIndex, count, attributes, excludedAttributes } = ctx.body;
      return scim(
        200,
        await listUsers(depsFor(opts, ctx), actorOf(ctx).tenantId, {
          ...(filter !== undefined ? { filter } : {}),
          ...(startIndex !== undefined ? { startIndex } : {}),
          ...(count !== undefined ? { count } : {}),
          ...(attributes ? { attributes: attributes.join(',') } : {}),
          ...(excludedAttributes ? { excludedAttributes: excludedAttributes.join(',') } : {}),
        }),
      );
    },
  });

const scimGetUserRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('GET', p('/Users/{id}')),
    operationId: 'scimGetUser',
    summary: 'One staff member',
    tags,
    params: Id,
    query: ProjectionQuery,
    headers: [ifNoneMatchHeader],
    responses: { 200: ok('The User', ScimUserProjected), 304: notModified },
    handler: async (ctx) => {
      const deps = depsFor(opts, ctx);
      const u = await getUser(deps, actorOf(ctx).tenantId, ctx.params.id);
      const etag = etagOfVersion(u.version);
      if (noneMatch(ctx.headers['if-none-match'], etag)) return { status: 304, headers: { etag } };
      return scim(200, project(userView(deps, u), ctx.query.attributes, ctx.query.excludedAttributes), etag);
    },
  });

const scimDeleteUserRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('DELETE', p('/Users/{id}')),
    operationId: 'scimDeleteUser',
    summary: 'Deprovision and delete a staff member (tombstone kept)',
    tags,
    params: Id,
    headers: [ifMatchHeader],
    responses: { 204: { description: "Deleted; the member's sessions are revoked" } },
    handler: async (ctx) => {
      await deleteUser(depsFor(opts, ctx), actorOf(ctx), ctx.params.id, ctx.headers['if-match']);
      return { status: 204 };
    },
  });

const scimListGroupsRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('GET', p('/Groups')),
    operationId: 'scimListGroups',
    summary: 'The role groups, one per staff role (filter, startIndex, count)',
    tags,
    query: ListQuery,
    responses: { 200: ok('ListResponse', ScimListResponse(ScimGroupListed)) },
    handler: async (ctx) => scim(200, await listGroups(depsFor(opts, ctx), actorOf(ctx).tenantId, ctx.query)),
  });

const scimCreateGroupRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('POST', p('/Groups')),
    operationId: 'scimCreateGroup',
    summary: 'Link an identity-provider group mapped to a role',
    tags,
    body: Body,
    responses: { 201: ok('The role group', ScimGroup) },
    handler: async (ctx) => {
      const g = await createGroup(depsFor(opts, ctx), actorOf(ctx), ctx.body);
      return scim(201, g.body, g.version);
    },
  });

const scimGetGroupRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('GET', p('/Groups/{id}')),
    operationId: 'scimGetGroup',
    summary: 'One role group with its members',
    tags,
    params: Id,
    headers: [ifNoneMatchHeader],
    responses: { 200: ok('The Group', ScimGroup), 304: notModified },
    handler: async (ctx) => {
      const g = await getGroup(depsFor(opts, ctx), actorOf(ctx).tenantId, ctx.params.id);
      if (noneMatch(ctx.headers['if-none-match'], g.version))
        return { status: 304, headers: { etag: g.version } };
      return scim(200, g.body, g.version);
    },
  });

const scimDeleteGroupRoute = (opts: ScimOpts): RouteSpec =>
  defineRoute({
    ...declared('DELETE', p('/Groups/{id}')),
    operationId: 'scimDeleteGroup',
    summary: 'Refused: role groups are not deleted',
    tags,
    params: Id,
    responses: { 400: ok('SCIM error, scimType mutability', ScimErrorSchema) },
    handler: async (ctx) => {
      await getGroup(depsFor(opts, ctx), actorOf(ctx).tenantId, ctx.params.id);
      throw new AppError('SCIM_MUTABILITY', 'role groups cannot be deleted; remove their members instead');
    },
  });

export function scimRoutes(opts: ScimOpts): RouteSpec[] {
  return [
    scimServiceProviderConfigRoute(opts),
    ...discovery(opts, 'ResourceTypes', 'ResourceType', (base) => resourceTypes(base), ScimResourceType),
    ...discovery(opts, 'Schemas', 'Schema', (base) => schemas(base), ScimSchemaDocument),
    scimCreateUserRoute(opts),
    scimListUsersRoute(opts),
    scimSearchUsersRoute(opts),
    scimGetUserRoute(opts),
    userWrite(opts, 'PUT', 'scimReplaceUser', 'Replace a staff member', replaceUser),
    userWrite(opts, 'PATCH', 'scimPatchUser', 'Modify a staff member (RFC 7644 section 3.5.2)', patchUser),
    scimDeleteUserRoute(opts),
    scimListGroupsRoute(opts),
    scimCreateGroupRoute(opts),
    scimGetGroupRoute(opts),
    groupWrite(opts, 'PUT', 'scimReplaceGroup', "Replace a role group's members", replaceGroup),
    groupWrite(opts, 'PATCH', 'scimPatchGroup', 'Add or remove members of a role group', patchGroup),
    scimDeleteGroupRoute(opts),
  ];
}
