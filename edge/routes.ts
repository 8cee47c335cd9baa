/**
 * The edge's one route table (SPEC 4.3 rule 1): method + route template → purpose, resource
 * type, action and the credential the route needs. The purpose is always derived here; a
 * client-sent purpose header is ignored and overwritten. A path with no entry gets
 * `operational`, which allows only what the policy says it allows.
 * Every feature adds its routes here; a test keeps this table and core's routes in step.
 */
import { TemplateTable } from '../lib/path-template.ts';
import { agentEdgeRoutes } from './agent-routes.ts';

/** What proves who the caller is. `public`: nothing (rate limited where it matters). */
export type Credential = 'public' | 'customer' | 'service' | 'staff' | 'core-client' | 'agent';

export interface EdgeRoute {
  method: string;
  template: string;
  purpose: string;
  resource: string;
  action: string;
  credential: Credential;
}

export const operationalPurpose = 'operational';

const platform = (method: string, template: string): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'platform', action: 'platform.read', credential: 'public',
});

const identity = (method: string, template: string, action: string, credential: Credential): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'customer_auth', action, credential,
});

const core = (method: string, template: string, resource: string, action: string): EdgeRoute => ({
  method, template, purpose: 'core.banking', resource, action, credential: 'core-client',
});

const authz = (method: string, template: string, action: string): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'authz', action, credential: 'staff',
});

/** The platform routes are the first entries; later features append theirs. */
export const edgeRoutes: EdgeRoute[] = [
  platform('GET', '/v1/health'),
  platform('GET', '/v1/ready'),
  platform('GET', '/v1/metrics'),
  platform('GET', '/v1/version'),
  platform('GET', '/v1/openapi.json'),
  platform('GET', '/v1/docs'),
  platform('GET', '/v1/docs/{asset}'),
  // decision and simulation (SPEC 4.4): staff with the ops role
  authz('POST', '/authz/decision', 'authz.decide'),
  authz('POST', '/authz/simulate', 'authz.simulate'),
  authz('GET', '/v1/auth/simulate', 'authz.simulate'),
  authz('POST', '/v1/auth/simulate', 'authz.simulate'),
  // API keys (SPEC 4.4): tenant admins manage their machine clients' keys
  { method: 'POST', template: '/api-keys', purpose: operationalPurpose, resource: 'api_key', action: 'apikey.create', credential: 'staff' },
  { method: 'GET', template: '/api-keys', purpose: operationalPurpose, resource: 'api_key', action: 'apikey.read', credential: 'staff' },
  { method: 'GET', template: '/api-keys/{id}', purpose: operationalPurpose, resource: 'api_key', action: 'apikey.read', credential: 'staff' },
  { method: 'DELETE', template: '/api-keys/{id}', purpose: operationalPurpose, resource: 'api_key', action: 'apikey.revoke', credential: 'staff' },
  // customer identity (SPEC 4.2; issue 3): unauthenticated ones are public and rate limited
  identity('POST', '/customers/auth/otp/send', 'auth.otp_send', 'public'),
  identity('POST', '/customers/auth/otp/verify', 'auth.otp_verify', 'public'),
  identity('POST', '/customers/auth/pin/set', 'auth.pin_set', 'public'),
  identity('POST', '/customers/auth/login', 'auth.login', 'public'),
  identity('POST', '/customers/auth/token/refresh', 'auth.refresh', 'public'),
  identity('GET', '/.well-known/jwks.json', 'auth.jwks', 'public'),
  identity('POST', '/customers/auth/logout', 'auth.logout', 'customer'),
  identity('POST', '/customers/auth/stepup/otp', 'auth.stepup_otp', 'customer'),
  identity('POST', '/customers/auth/stepup/complete', 'auth.stepup', 'customer'),
  identity('GET', '/customers/sessions', 'session.list', 'customer'),
  identity('DELETE', '/customers/sessions/{id}', 'session.revoke', 'customer'),
  identity('POST', '/customers/devices', 'device.register', 'customer'),
  // core banking ledger (SPEC 4.1, 5.1; issue 5): core client tokens, scope checked at the edge and in core
  { method: 'POST', template: '/oauth2/token', purpose: operationalPurpose, resource: 'oauth', action: 'token.issue', credential: 'public' },
  core('POST', '/v1/core/accounts', 'account', 'account.create'),
  core('GET', '/v1/core/accounts/{id}', 'account', 'account.read'),
  core('GET', '/v1/core/accounts/{id}/balances', 'account', 'balance.read'),
  core('POST', '/v1/core/accounts/{id}/close', 'account', 'account.close'),
  core('POST', '/v1/core/postings', 'posting', 'posting.create'),
  core('GET', '/v1/core/postings/{id}', 'posting', 'posting.read'),
  core('POST', '/v1/core/postings/{id}/reverse', 'posting', 'posting.reverse'),
  core('POST', '/v1/core/holds', 'hold', 'hold.create'),
  core('GET', '/v1/core/holds/{id}', 'hold', 'hold.read'),
  core('POST', '/v1/core/holds/{id}/capture', 'hold', 'hold.capture'),
  core('POST', '/v1/core/holds/{id}/void', 'hold', 'hold.void'),
  core('POST', '/v1/core/limits/check', 'limit', 'limit.check'),
  core('POST', '/v1/core/statements', 'statement', 'statement.generate'),
  core('POST', '/v1/core/savings-products', 'savings_product', 'savings_product.create'),
  core('GET', '/v1/core/savings-products', 'savings_product', 'savings_product.read'),
  core('POST', '/v1/core/overdraft-lines', 'overdraft_line', 'overdraft_line.create'),
  core('GET', '/v1/core/overdraft-lines/{id}', 'overdraft_line', 'overdraft_line.read'),
  core('POST', '/v1/core/overdraft-lines/{id}/close', 'overdraft_line', 'overdraft_line.close'),
  // agent operations (SPEC 4.5; issue 9): edge/agent-routes.ts
  ...agentEdgeRoutes,
];

export interface ResolvedRoute {
  route: EdgeRoute | undefined;
  purpose: string;
  resource: string;
  action: string;
  params: Record<string, string>;
}

export function buildRouteTable(routes: EdgeRoute[] = edgeRoutes): (method: string, path: string) => ResolvedRoute {
  const table = new TemplateTable<EdgeRoute>();
  for (const r of routes) table.add(r.method, r.template, r);
  return (method, path) => {
    const m = table.find(method, path);
    if (!m) return { route: undefined, purpose: operationalPurpose, resource: 'unmapped', action: 'unmapped', params: {} };
    return { route: m.entry, purpose: m.entry.purpose, resource: m.entry.resource, action: m.entry.action, params: m.params };
  };
}
