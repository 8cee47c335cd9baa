/**
 * SCIM 2.0 provisioning (issue 14 item 1): the identity provider's SCIM client with the tenant's
 * SCIM bearer credential, which alone sets the tenant; SCIM error bodies (RFC 7644 3.12).
 */
import { operationalPurpose, type RouteDeclaration } from './types.ts';

const scim = (method: string, path: string, action: 'scim.read' | 'scim.write'): RouteDeclaration => ({
  method,
  template: `/scim/v2${path}`,
  purpose: operationalPurpose,
  resource: 'scim',
  action,
  credential: 'scim',
  roles: ['scim'],
  errorFormat: 'scim',
});

export const scimRoutes: RouteDeclaration[] = [
  scim('GET', '/ServiceProviderConfig', 'scim.read'),
  scim('GET', '/ResourceTypes', 'scim.read'),
  scim('GET', '/ResourceTypes/{id}', 'scim.read'),
  scim('GET', '/Schemas', 'scim.read'),
  scim('GET', '/Schemas/{id}', 'scim.read'),
  scim('POST', '/Users', 'scim.write'),
  scim('GET', '/Users', 'scim.read'),
  scim('POST', '/Users/.search', 'scim.read'),
  scim('GET', '/Users/{id}', 'scim.read'),
  scim('PUT', '/Users/{id}', 'scim.write'),
  scim('PATCH', '/Users/{id}', 'scim.write'),
  scim('DELETE', '/Users/{id}', 'scim.write'),
  scim('POST', '/Groups', 'scim.write'),
  scim('GET', '/Groups', 'scim.read'),
  scim('GET', '/Groups/{id}', 'scim.read'),
  scim('PUT', '/Groups/{id}', 'scim.write'),
  scim('PATCH', '/Groups/{id}', 'scim.write'),
  scim('DELETE', '/Groups/{id}', 'scim.write'),
];
