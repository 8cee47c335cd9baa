/**
 * Response schemas of `/scim/v2` (issue 15 item 4), as the handlers write them: Users
 * (resource.ts `toScimUser`, then `project` for GET and lists), role Groups (groups.ts `view`),
 * ListResponses, and the discovery documents (discovery.ts). A User keeps the attributes its
 * identity provider wrote (and the enterprise extension), so it alone allows other members.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { staffRoleGroups } from '../store.ts';
import { userSchema } from './filter.ts';
import { enterpriseSchema, groupSchema, listSchema } from './resource.ts';
import { enrolmentExtension } from './users.ts';

const Timestamp = Type.String({ format: 'date-time' });
/**
 * `$ref` (the referenced resource's location) is not declared as a property: a `$ref` key in the
 * schema reads as a JSON reference to OpenAPI tools. Other members are allowed, so it passes.
 */
const refNote = ' and `$ref`, the location of the referenced resource';
const ETag = Type.String({ pattern: '^W/"' });
const schemasOf = (...urns: string[]) =>
  Type.Array(
    urns.length === 1 ? Type.Literal(urns[0] as string) : Type.Union(urns.map((u) => Type.Literal(u))),
    { minItems: 1 },
  );

/** A role group a User is a member of (`groups`, read-only). */
const UserGroup = Type.Object(
  { value: Type.String(), display: Type.String(), type: Type.Literal('direct') },
  { description: `The role group's id and name${refNote}` },
);
const UserMeta = Type.Object({
  resourceType: Type.Literal('User'),
  created: Timestamp,
  lastModified: Timestamp,
  location: Type.String(),
  version: ETag,
});

/** A User as written by POST, PUT and PATCH: every attribute. */
export const ScimUser = Type.Object(
  {
    // The enrolment extension appears in the 201 of a provisioning only (issue 16 item 1).
    schemas: schemasOf(userSchema, enterpriseSchema, enrolmentExtension),
    id: Type.String(),
    externalId: Type.Optional(Type.String()),
    userName: Type.String(),
    displayName: Type.Optional(Type.String()),
    active: Type.Boolean(),
    groups: Type.Array(UserGroup),
    meta: UserMeta,
  },
  {
    additionalProperties: true,
    description: 'SCIM User (RFC 7643 section 4.1); other attributes as the identity provider wrote them',
  },
);

/**
 * A User as GET and the lists return it: `attributes` keeps only the named (sub-)attributes and
 * `excludedAttributes` drops them (RFC 7644 section 3.9); `schemas` and `id` always stay.
 */
export const ScimUserProjected = Type.Object(
  {
    schemas: ScimUser.properties.schemas,
    id: Type.String(),
    externalId: Type.Optional(Type.String()),
    userName: Type.Optional(Type.String()),
    displayName: Type.Optional(Type.String()),
    active: Type.Optional(Type.Boolean()),
    groups: Type.Optional(Type.Array(Type.Partial(UserGroup))),
    meta: Type.Optional(Type.Partial(UserMeta)),
  },
  { additionalProperties: true, description: 'SCIM User limited by attributes / excludedAttributes' },
);

const GroupMember = Type.Object(
  { value: Type.String(), display: Type.String(), type: Type.Literal('User') },
  { description: `The User's id and userName${refNote}` },
);
const groupProperties = {
  schemas: schemasOf(groupSchema),
  id: Type.String(),
  displayName: Type.Union(Object.keys(staffRoleGroups).map((n) => Type.Literal(n))),
  members: Type.Array(GroupMember),
  meta: Type.Object({ resourceType: Type.Literal('Group'), location: Type.String(), version: ETag }),
};
/** A role group with its members (SCIM Group, RFC 7643 section 4.2). */
export const ScimGroup = Type.Object(groupProperties, {
  description: 'SCIM Group: one of the six staff roles',
});
/** A role group as listed: `excludedAttributes=members` leaves the members out. */
export const ScimGroupListed = Type.Object({
  ...groupProperties,
  members: Type.Optional(groupProperties.members),
});

/** RFC 7644 section 3.4.2: a page of resources. */
export const ScimListResponse = <T extends TSchema>(resource: T) =>
  Type.Object({
    schemas: schemasOf(listSchema),
    totalResults: Type.Integer({ minimum: 0 }),
    startIndex: Type.Integer({ minimum: 1 }),
    itemsPerPage: Type.Integer({ minimum: 0 }),
    Resources: Type.Array(resource),
  });

// --- discovery (RFC 7644 section 4, RFC 7643 sections 5-7) ---------------------------------

const Supported = Type.Object({ supported: Type.Boolean() });
export const ScimServiceProviderConfig = Type.Object({
  schemas: schemasOf('urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig'),
  documentationUri: Type.String(),
  patch: Supported,
  bulk: Type.Object({
    supported: Type.Boolean(),
    maxOperations: Type.Integer({ minimum: 0 }),
    maxPayloadSize: Type.Integer({ minimum: 0 }),
  }),
  filter: Type.Object({ supported: Type.Boolean(), maxResults: Type.Integer({ minimum: 0 }) }),
  changePassword: Supported,
  sort: Supported,
  etag: Supported,
  authenticationSchemes: Type.Array(
    Type.Object({
      type: Type.String(),
      name: Type.String(),
      description: Type.String(),
      primary: Type.Boolean(),
    }),
  ),
  meta: Type.Object({ resourceType: Type.Literal('ServiceProviderConfig'), location: Type.String() }),
});

export const ScimResourceType = Type.Object({
  schemas: schemasOf('urn:ietf:params:scim:schemas:core:2.0:ResourceType'),
  id: Type.String(),
  name: Type.String(),
  endpoint: Type.String(),
  description: Type.String(),
  schema: Type.String(),
  schemaExtensions: Type.Optional(
    Type.Array(Type.Object({ schema: Type.String(), required: Type.Boolean() })),
  ),
  meta: Type.Object({ resourceType: Type.Literal('ResourceType'), location: Type.String() }),
});

const lits = (...v: string[]) => Type.Union(v.map((x) => Type.Literal(x)));
/** RFC 7643 section 7: an attribute definition. */
const attributeProperties = {
  name: Type.String(),
  type: lits('string', 'boolean', 'decimal', 'integer', 'dateTime', 'binary', 'reference', 'complex'),
  multiValued: Type.Boolean(),
  required: Type.Boolean(),
  caseExact: Type.Boolean(),
  mutability: lits('readOnly', 'readWrite', 'immutable', 'writeOnly'),
  returned: lits('always', 'never', 'default', 'request'),
  uniqueness: lits('none', 'server', 'global'),
  referenceTypes: Type.Optional(Type.Array(Type.String())),
};
const ScimAttribute = Type.Object({
  ...attributeProperties,
  subAttributes: Type.Optional(Type.Array(Type.Object(attributeProperties))),
});

export const ScimSchemaDocument = Type.Object({
  schemas: schemasOf('urn:ietf:params:scim:schemas:core:2.0:Schema'),
  id: Type.String(),
  name: Type.String(),
  description: Type.String(),
  attributes: Type.Array(ScimAttribute),
  meta: Type.Object({ resourceType: Type.Literal('Schema'), location: Type.String() }),
});
