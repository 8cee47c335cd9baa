/**
 * SCIM discovery (RFC 7644 section 4): ServiceProviderConfig, ResourceTypes and Schemas, so a
 * client learns what this service supports: PATCH, filter (200 results a page), ETags; no bulk,
 * no sort, no password change (staff sign in through their identity provider or passkeys).
 */
import { userSchema } from './filter.ts';
import { enterpriseSchema, groupSchema, listSchema } from './resource.ts';
import { maxPageSize } from './users.ts';

const sp = 'urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig';
const rt = 'urn:ietf:params:scim:schemas:core:2.0:ResourceType';
const schemaSchema = 'urn:ietf:params:scim:schemas:core:2.0:Schema';

export function serviceProviderConfig(baseUrl: string) {
  return {
    schemas: [sp],
    documentationUri: 'https://datatracker.ietf.org/doc/html/rfc7644',
    patch: { supported: true },
    bulk: { supported: false, maxOperations: 0, maxPayloadSize: 0 },
    filter: { supported: true, maxResults: maxPageSize },
    changePassword: { supported: false },
    sort: { supported: false },
    etag: { supported: true },
    authenticationSchemes: [
      {
        type: 'oauthbearertoken',
        name: 'SCIM bearer credential',
        primary: true,
        description:
          'A per-tenant SCIM credential (scim_...) issued by a tenant admin at /v1/scim-credentials',
      },
    ],
    meta: { resourceType: 'ServiceProviderConfig', location: `${baseUrl}/ServiceProviderConfig` },
  };
}

export function resourceTypes(baseUrl: string) {
  const user = {
    schemas: [rt],
    id: 'User',
    name: 'User',
    endpoint: '/Users',
    description: 'Staff member',
    schema: userSchema,
    schemaExtensions: [{ schema: enterpriseSchema, required: false }],
    meta: { resourceType: 'ResourceType', location: `${baseUrl}/ResourceTypes/User` },
  };
  const group = {
    schemas: [rt],
    id: 'Group',
    name: 'Group',
    endpoint: '/Groups',
    description: 'Staff role (six per tenant)',
    schema: groupSchema,
    meta: { resourceType: 'ResourceType', location: `${baseUrl}/ResourceTypes/Group` },
  };
  return { User: user, Group: group };
}

type Attr = Record<string, unknown>;
const attr = (name: string, o: Partial<Attr> = {}): Attr => ({
  name,
  type: 'string',
  multiValued: false,
  required: false,
  caseExact: false,
  mutability: 'readWrite',
  returned: 'default',
  uniqueness: 'none',
  ...o,
});
const sub = (name: string, o: Partial<Attr> = {}) => attr(name, o);

const multi = (name: string) =>
  attr(name, {
    type: 'complex',
    multiValued: true,
    subAttributes: [sub('value'), sub('display'), sub('type'), sub('primary', { type: 'boolean' })],
  });

/** The core User schema (RFC 7643 section 4.1) as this service supports it. */
function userSchemaDocument(baseUrl: string) {
  return {
    schemas: [schemaSchema],
    id: userSchema,
    name: 'User',
    description: 'Staff member',
    attributes: [
      attr('userName', { required: true, uniqueness: 'server' }),
      attr('name', {
        type: 'complex',
        subAttributes: [
          'formatted',
          'familyName',
          'givenName',
          'middleName',
          'honorificPrefix',
          'honorificSuffix',
        ].map((n) => sub(n)),
      }),
      attr('displayName'),
      attr('nickName'),
      attr('profileUrl', { type: 'reference', referenceTypes: ['external'] }),
      attr('title'),
      attr('userType'),
      attr('preferredLanguage'),
      attr('locale'),
      attr('timezone'),
      attr('active', { type: 'boolean' }),
      attr('password', { mutability: 'writeOnly', returned: 'never' }),
      multi('emails'),
      multi('phoneNumbers'),
      multi('ims'),
      multi('photos'),
      attr('addresses', {
        type: 'complex',
        multiValued: true,
        subAttributes: ['formatted', 'streetAddress', 'locality', 'region', 'postalCode', 'country', 'type']
          .map((n) => sub(n))
          .concat([sub('primary', { type: 'boolean' })]),
      }),
      attr('groups', {
        type: 'complex',
        multiValued: true,
        mutability: 'readOnly',
        subAttributes: [
          sub('value', { mutability: 'readOnly' }),
          sub('$ref', { type: 'reference', referenceTypes: ['Group'], mutability: 'readOnly' }),
          sub('display', { mutability: 'readOnly' }),
          sub('type', { mutability: 'readOnly' }),
        ],
      }),
      multi('entitlements'),
      multi('roles'),
      multi('x509Certificates'),
      attr('externalId', { caseExact: true }),
    ],
    meta: { resourceType: 'Schema', location: `${baseUrl}/Schemas/${userSchema}` },
  };
}

/** The enterprise User extension (RFC 7643 section 4.3). */
function enterpriseSchemaDocument(baseUrl: string) {
  return {
    schemas: [schemaSchema],
    id: enterpriseSchema,
    name: 'EnterpriseUser',
    description: 'Enterprise User',
    attributes: [
      attr('employeeNumber'),
      attr('costCenter'),
      attr('organization'),
      attr('division'),
      attr('department'),
      attr('manager', {
        type: 'complex',
        subAttributes: [
          sub('value'),
          sub('$ref', { type: 'reference', referenceTypes: ['User'] }),
          sub('displayName', { mutability: 'readOnly' }),
        ],
      }),
    ],
    meta: { resourceType: 'Schema', location: `${baseUrl}/Schemas/${enterpriseSchema}` },
  };
}

/** The Group schema (RFC 7643 section 4.2): a staff role and its members. */
function groupSchemaDocument(baseUrl: string) {
  return {
    schemas: [schemaSchema],
    id: groupSchema,
    name: 'Group',
    description: 'Staff role',
    attributes: [
      attr('displayName', { required: true, mutability: 'immutable', uniqueness: 'server' }),
      attr('members', {
        type: 'complex',
        multiValued: true,
        subAttributes: [
          sub('value', { mutability: 'immutable' }),
          sub('$ref', { type: 'reference', referenceTypes: ['User'], mutability: 'immutable' }),
          sub('display', { mutability: 'readOnly' }),
          sub('type', { mutability: 'immutable' }),
        ],
      }),
    ],
    meta: { resourceType: 'Schema', location: `${baseUrl}/Schemas/${groupSchema}` },
  };
}

export function schemas(baseUrl: string) {
  return {
    [userSchema]: userSchemaDocument(baseUrl),
    [enterpriseSchema]: enterpriseSchemaDocument(baseUrl),
    [groupSchema]: groupSchemaDocument(baseUrl),
  };
}

export function listOf(resources: unknown[]) {
  return {
    schemas: [listSchema],
    totalResults: resources.length,
    startIndex: 1,
    itemsPerPage: resources.length,
    Resources: resources,
  };
}
