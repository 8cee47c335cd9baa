/**
 * Response schemas of the staff administration routes (issue 15 item 4): SCIM credentials,
 * service tokens, group mappings, session administration and the identity provider. Each is
 * what its handler writes (core/staff/credentials.ts views, sessions-admin.ts `view`, idp.ts
 * `publicView`); the response check holds the handlers to them under the test suite.
 */
import { Type } from '@sinclair/typebox';
import { ItemsOf, Nullable, Timestamp, Uuid } from '../admin/schemas.ts';
import { staffRoles } from './store.ts';

/** A SCIM credential as listed and revoked (credentials.ts `scimView`): never its token. */
export const ScimCredential = Type.Object({
  id: Uuid,
  name: Type.String(),
  created_by: Type.String(),
  created_at: Timestamp,
  revoked_at: Nullable(Timestamp),
});
/** The credential as issued: its token, shown once. */
export const IssuedScimCredential = Type.Object({
  ...ScimCredential.properties,
  token: Type.String({ pattern: '^scim_' }),
});

/** A service token as listed and revoked (credentials.ts `tokenView`): never its value. */
export const ServiceToken = Type.Object({
  id: Uuid,
  name: Type.String(),
  roles: Type.Array(Type.String()),
  expires_at: Nullable(Timestamp),
  created_by: Nullable(Type.String()),
  created_at: Timestamp,
  rotated_at: Nullable(Timestamp),
  previous_valid_until: Nullable(Timestamp),
  revoked_at: Nullable(Timestamp),
});
/** The service token as issued or rotated: its new value, shown once. */
export const IssuedServiceToken = Type.Object({
  ...ServiceToken.properties,
  token: Type.String({ pattern: '^svc_' }),
});

/** The identity-provider group → role mapping in force. */
export const GroupMappings = ItemsOf(
  Type.Object({ idp_group: Type.String(), role: Type.Union(staffRoles.map((r) => Type.Literal(r))) }),
);

/**
 * A live session of a customer, agent or staff member (sessions-admin.ts `view`). For support
 * the address is its network (`10.1.x.x`, `2001:db8:1::/48`, `masked`) and the device its last
 * four characters (`****abcd`).
 */
export const SubjectSession = Type.Object({
  id: Uuid,
  subjectType: Type.Union([Type.Literal('customer'), Type.Literal('agent'), Type.Literal('staff')]),
  subjectId: Type.String(),
  createdAt: Timestamp,
  lastSeen: Timestamp,
  aal: Type.Integer({ minimum: 1, maximum: 3 }),
  device: Nullable(Type.String()),
  ip: Nullable(Type.String()),
});

/** The tenant's OpenID Connect provider (idp.ts `publicView`): never the client secret. */
export const IdentityProviderView = Type.Object({
  issuer: Type.String(),
  clientId: Type.String(),
  hasClientSecret: Type.Boolean(),
  scopes: Type.Array(Type.String()),
  groupsClaim: Type.String(),
  redirectUri: Type.String(),
  version: Type.Integer({ minimum: 1 }),
  updatedAt: Timestamp,
});

/** A one-time passkey enrolment link as issued (the token is shown once; `path` carries it). */
export const EnrolmentLink = Type.Object({
  id: Type.String(),
  userId: Type.String(),
  token: Type.String(),
  path: Type.String(),
  expiresAt: Type.String(),
});
