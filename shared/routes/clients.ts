/**
 * Machine clients (SPEC 4.4, 5.1; issue 17): tenant admins manage API keys and OAuth clients;
 * the token endpoint and discovery (RFC 8414) are public.
 */
import {
  admins,
  operationalPurpose,
  operators,
  type RouteDeclaration,
  staffRoute as managed,
} from './types.ts';

const oauth = (method: string, template: string, action: string): RouteDeclaration => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'oauth',
  action,
  credential: 'public',
});

export const clientRoutes: RouteDeclaration[] = [
  managed('POST', '/api-keys', 'api_key', 'apikey.create', admins),
  managed('GET', '/api-keys', 'api_key', 'apikey.read', operators),
  managed('GET', '/api-keys/{id}', 'api_key', 'apikey.read', operators),
  managed('DELETE', '/api-keys/{id}', 'api_key', 'apikey.revoke', admins),
  oauth('POST', '/oauth2/token', 'token.issue'),
  oauth('GET', '/.well-known/oauth-authorization-server', 'auth.oauth_metadata'),
  managed('POST', '/v1/oauth-clients', 'oauth_client', 'oauthclient.create', admins),
  managed('GET', '/v1/oauth-clients', 'oauth_client', 'oauthclient.read', operators),
  managed('GET', '/v1/oauth-clients/{id}', 'oauth_client', 'oauthclient.read', operators),
  managed('POST', '/v1/oauth-clients/{id}/rotate', 'oauth_client', 'oauthclient.rotate', admins),
  managed('DELETE', '/v1/oauth-clients/{id}', 'oauth_client', 'oauthclient.revoke', admins),
];
