/**
 * Administration of staff provisioning and machine credentials (issue 14 items 1 and 6), over
 * the shared administration conventions (core/admin/http.ts: Problem+JSON, roles checked again
 * here, rate limits, Idempotency-Key, an audit record in every mutation's transaction):
 * - `/v1/scim-credentials`: issue (token shown once), list, revoke. Admin.
 * - `/v1/service-tokens`: issue (token shown once; roles; optional expires_at), list (no
 *   secrets), `:rotate` (new token; the previous one valid for `grace_seconds`, default 24 h),
 *   revoke. Admin.
 * - `/v1/staff/group-mappings`: the identity provider's group names → roles (SCIM Groups and
 *   federated sign-in read it). Admin writes, every staff role reads. A PUT takes away at once
 *   the roles a removed or changed mapping gave federated members (issue 16; mapping-change.ts).
 */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { adminRoute, checkIfMatch, etagOf, type AdminDeps } from '../admin/http.ts';
import { ItemsOf, Uuid } from '../admin/schemas.ts';
import type { RouteSpec } from '../http/route.ts';
import {
  defaultServiceTokenGraceS,
  issueScimCredential,
  issueServiceToken,
  listScimCredentials,
  listServiceTokens,
  maxServiceTokenGraceS,
  revokeScimCredential,
  revokeServiceToken,
  rotateServiceToken,
  serviceTokenRoles,
} from './credentials.ts';
import {
  GroupMappings,
  IssuedScimCredential,
  IssuedServiceToken,
  ScimCredential,
  ServiceToken,
} from './schemas.ts';
import { replaceGroupMappings } from './mapping-change.ts';
import { groupMappings, isStaffRole, staffRoles, type GroupMapping } from './store.ts';
import { declared } from '../http/declared.ts';

const Name = Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9 ._:-]*$' });
const IdParams = Type.Object({ id: Uuid });
const noStore = { 'cache-control': 'no-store' };

function scimCredentialRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.scim'];
  return [
    adminRoute(deps, {
      ...declared('POST', '/v1/scim-credentials'),
      operationId: 'issueScimCredential',
      summary: 'Issue a SCIM bearer credential for the tenant (the token is shown once)',
      tags,
      mode: 'create',
      body: Type.Object({ name: Name }, { additionalProperties: false }),
      responses: {
        201: {
          description: 'The credential and its token (keep it: it is never shown again)',
          schema: IssuedScimCredential,
        },
      },
      write: async (ctx, w) => {
        const { credential, token } = await issueScimCredential(
          w.q,
          w.caller.tenantId,
          ctx.body.name,
          w.caller.principalId,
          deps.now(),
        );
        await w.audit(
          'scim_credential.issue',
          { type: 'scim_credential', id: credential.id },
          { name: credential.name },
        );
        return { status: 201, headers: noStore, body: { ...credential, token } };
      },
    }),
    adminRoute(deps, {
      ...declared('GET', '/v1/scim-credentials'),
      operationId: 'listScimCredentials',
      summary: "The tenant's SCIM credentials (never their tokens)",
      tags,
      mode: 'read',
      responses: { 200: { description: '{items}', schema: ItemsOf(ScimCredential) } },
      read: async (_ctx, caller) => ({
        status: 200,
        body: { items: await listScimCredentials(deps.db, caller.tenantId) },
      }),
    }),
    adminRoute(deps, {
      ...declared('DELETE', '/v1/scim-credentials/{id}'),
      operationId: 'revokeScimCredential',
      summary: 'Revoke a SCIM credential; edges refuse it from the next request',
      tags,
      mode: 'write',
      params: IdParams,
      responses: { 200: { description: 'The revoked credential', schema: ScimCredential } },
      write: async (ctx, w) => {
        const c = await revokeScimCredential(
          w.q,
          w.caller.tenantId,
          ctx.params.id,
          w.caller.principalId,
          deps.now(),
        );
        await w.audit('scim_credential.revoke', { type: 'scim_credential', id: c.id }, { name: c.name });
        return { status: 200, body: c };
      },
    }),
  ];
}

const Role = Type.Union(serviceTokenRoles.map((r) => Type.Literal(r)));

const tags = ['admin.service-tokens'];

const issueServiceTokenRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/service-tokens'),
    operationId: 'issueServiceToken',
    summary: 'Issue a service token for a machine (the token is shown once)',
    tags,
    mode: 'create',
    body: Type.Object(
      {
        name: Name,
        roles: Type.Array(Role, { minItems: 1, maxItems: serviceTokenRoles.length, uniqueItems: true }),
        expires_at: Type.Optional(Type.String({ format: 'date-time' })),
      },
      { additionalProperties: false },
    ),
    responses: {
      201: {
        description: 'The service token and its value (never shown again)',
        schema: IssuedServiceToken,
      },
    },
    write: async (ctx, w) => {
      const b = ctx.body;
      if (b.expires_at !== undefined && Date.parse(b.expires_at) <= deps.now())
        throw new AppError('VALIDATION_FAILED', 'expires_at is in the past');
      const { serviceToken, token } = await issueServiceToken(
        w.q,
        w.caller.tenantId,
        { name: b.name, roles: b.roles, expiresAt: b.expires_at },
        w.caller.principalId,
        deps.now(),
      );
      await w.audit(
        'service_token.issue',
        { type: 'service_token', id: serviceToken.id },
        { name: serviceToken.name, roles: serviceToken.roles, expires_at: serviceToken.expires_at },
      );
      return { status: 201, headers: noStore, body: { ...serviceToken, token } };
    },
  });

const listServiceTokensRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/service-tokens'),
    operationId: 'listServiceTokens',
    summary: "The tenant's service tokens (never their values)",
    tags,
    mode: 'read',
    responses: { 200: { description: '{items}', schema: ItemsOf(ServiceToken) } },
    read: async (_ctx, caller) => ({
      status: 200,
      body: { items: await listServiceTokens(deps.db, caller.tenantId) },
    }),
  });

const rotateServiceTokenRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/service-tokens/{id}:rotate'),
    operationId: 'rotateServiceToken',
    summary:
      'A new token for the same machine; the previous one stays valid for grace_seconds (default 86400, at most 604800)',
    tags,
    mode: 'create',
    params: IdParams,
    body: Type.Object(
      { grace_seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: maxServiceTokenGraceS })) },
      { additionalProperties: false },
    ),
    responses: {
      201: {
        description: 'The service token and its new value (never shown again)',
        schema: IssuedServiceToken,
      },
    },
    write: async (ctx, w) => {
      const grace = ctx.body?.grace_seconds ?? defaultServiceTokenGraceS;
      const { serviceToken, token } = await rotateServiceToken(
        w.q,
        w.caller.tenantId,
        ctx.params.id,
        grace,
        deps.now(),
      );
      await w.audit(
        'service_token.rotate',
        { type: 'service_token', id: serviceToken.id },
        { grace_seconds: grace, previous_valid_until: serviceToken.previous_valid_until },
      );
      return { status: 201, headers: noStore, body: { ...serviceToken, token } };
    },
  });

const revokeServiceTokenRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/service-tokens/{id}'),
    operationId: 'revokeServiceToken',
    summary: 'Revoke a service token (and its previous one); edges refuse it at once',
    tags,
    mode: 'write',
    params: IdParams,
    responses: { 200: { description: 'The revoked token', schema: ServiceToken } },
    write: async (ctx, w) => {
      const t = await revokeServiceToken(
        w.q,
        w.caller.tenantId,
        ctx.params.id,
        w.caller.principalId,
        deps.now(),
      );
      await w.audit('service_token.revoke', { type: 'service_token', id: t.id }, { name: t.name });
      return { status: 200, body: t };
    },
  });

function serviceTokenRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    issueServiceTokenRoute(deps),
    listServiceTokensRoute(deps),
    rotateServiceTokenRoute(deps),
    revokeServiceTokenRoute(deps),
  ];
}

const Mapping = Type.Object(
  {
    idp_group: Type.String({ minLength: 1, maxLength: 256 }),
    role: Type.Union(staffRoles.map((r) => Type.Literal(r))),
  },
  { additionalProperties: false },
);

/**
 * The mappings as GET and PUT answer them. Their ETag (etagOf, as on every administration GET)
 * is the version a PUT's If-Match names: a hash of the stored set, so it changes whenever the
 * set does, and a PUT of the same set, which changes nothing, leaves it.
 */
function mappingsView(mappings: readonly GroupMapping[]) {
  return { items: mappings.map((m) => ({ idp_group: m.idpGroup, role: m.role })) };
}

function groupMappingRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.staff'];
  return [
    adminRoute(deps, {
      ...declared('GET', '/v1/staff/group-mappings'),
      operationId: 'listStaffGroupMappings',
      summary:
        "The tenant's identity-provider group → role mapping (its ETag is what a PUT's If-Match names)",
      tags,
      mode: 'read',
      responses: { 200: { description: '{items: [{idp_group, role}]}', schema: GroupMappings } },
      read: async (_ctx, caller) => ({
        status: 200,
        body: mappingsView(await groupMappings(deps.db, caller.tenantId)),
      }),
    }),
    adminRoute(deps, {
      ...declared('PUT', '/v1/staff/group-mappings'),
      operationId: 'putStaffGroupMappings',
      summary:
        'Replace the whole mapping (idempotent); with If-Match, only while the mapping is still the one read (412 otherwise)',
      tags,
      mode: 'write',
      // Optional: clients written before the ETag send none and keep last-writer-wins.
      ifMatch: 'optional',
      answersRepresentation: true,
      body: Type.Object({ items: Type.Array(Mapping, { maxItems: 500 }) }, { additionalProperties: false }),
      responses: { 200: { description: 'The mapping now in force', schema: GroupMappings } },
      write: async (ctx, w) => {
        const items = ctx.body.items
          .filter((m) => isStaffRole(m.role))
          .map((m) => ({ idpGroup: m.idp_group, role: m.role }));
        const { mappings, revoked } = await replaceGroupMappings(w.q, w.caller.tenantId, items, {
          // Judged under the mappings lock, so two Admins who read the same mapping cannot both
          // replace it: the second is told it changed instead of undoing the first unseen.
          precondition: (current) => {
            if (ctx.headers['if-match']) checkIfMatch(ctx.headers, mappingsView(current));
          },
          // Issue 16: the roles a removed mapping gave end now, each audited as SCIM audits a
          // role taken away (staff.role_remove), naming this Admin.
          audit: (taken) =>
            w.auditEach(
              'staff.role_remove',
              taken.map((r) => ({
                target: { type: 'staff_user', id: r.userId },
                attrs: { role: r.role, reason: 'group_mapping_removed', groups: r.groups },
              })),
            ),
        });
        await w.audit(
          'staff.group_mappings.put',
          { type: 'staff_group_mappings', id: w.caller.tenantId },
          { count: items.length, rolesRevoked: revoked.length },
        );
        const body = mappingsView(mappings);
        return { status: 200, headers: { etag: etagOf(body) }, body };
      },
    }),
  ];
}

export function staffAdminRoutes(deps: AdminDeps): RouteSpec[] {
  return [...scimCredentialRoutes(deps), ...serviceTokenRoutes(deps), ...groupMappingRoutes(deps)];
}
