/**
 * The edge's one route table (SPEC 4.3 rule 1): method + route template → purpose, resource
 * type, action and the credential the route needs. The purpose is always derived here; a
 * client-sent purpose header is ignored and overwritten. A path with no entry gets
 * `operational`, which allows only what the policy says it allows.
 * Every feature adds its routes here; a test keeps this table and core's routes in step.
 */
import type { MoneyMovement } from '../shared/api-key-budget.ts';
import type { ErrorFormat } from '../shared/errors.ts';
import { TemplateTable } from '../shared/path-template.ts';
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
  /**
   * Envoy's per-route `check_settings.disable_request_body_buffering`: Check sees headers only
   * (an empty body) and the body streams to core unbuffered and unlimited by the edge's 8192
   * bytes, so core must enforce its size and type. For uploads; never for routes whose
   * decision needs the body (tenant in the body, signed requests, request-bound step-up).
   */
  disableRequestBodyBuffering?: true;
  /**
   * Set on every route that moves money: how an API key's daily amount budget counts it
   * (shared/api-key-budget.ts; SPEC 5.4.5, issue 13 item 5). Core's route declares the same
   * (`movesMoney`, checked by test/edge/routes.test.ts) and refuses to move money without it.
   */
  money?: MoneyMovement;
  /**
   * The audience's error format (issue 15 item 5): `problem` on the administration API, whose
   * refusals are Problem+JSON (SPEC 7.3) whether the edge, the dev gateway or core refuses;
   * `{code, message}` (SPEC 2.2) otherwise. Core's route declares the same (`errorFormat`,
   * checked by test/edge/routes.test.ts).
   */
  errorFormat?: ErrorFormat;
}

export const operationalPurpose = 'operational';

const platform = (method: string, template: string): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'platform', action: 'platform.read', credential: 'public',
});

const identity = (method: string, template: string, action: string, credential: Credential): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'customer_auth', action, credential,
});

const core = (method: string, template: string, resource: string, action: string, money?: MoneyMovement): EdgeRoute => ({
  method, template, purpose: 'core.banking', resource, action, credential: 'core-client', ...(money ? { money } : {}),
});

const authz = (method: string, template: string, action: string): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'authz', action, credential: 'staff',
});

/** Administration API (SPEC 4.6, 5.5; issue 6): staff credentials, roles per action in the registry, checked again in core. */
const admin = (method: string, template: string, resource: string, action: string): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource, action, credential: 'staff', errorFormat: 'problem',
});

/**
 * Staff sign-in (SPEC 4.4; issue 16): public at the edge like customer sign-in. Routes acting
 * for a signed-in person (passkeys, sessions, sign-out, step-up) carry the staff access token,
 * which core verifies itself (core/staff/auth.ts) until the edge accepts staff tokens.
 */
const staffAuth = (method: string, template: string, action: string): EdgeRoute => ({
  method, template, purpose: operationalPurpose, resource: 'staff_auth', action, credential: 'public',
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
  // customer money (SPEC 4.3; issue 7): purposes fixed here, never taken from the client
  { method: 'POST', template: '/v1/transfers', purpose: 'customer.transact', resource: 'transaction', action: 'transfer.create', credential: 'customer', money: 'request' },
  { method: 'POST', template: '/v1/transfers/confirm', purpose: 'customer.transact', resource: 'transaction', action: 'transfer.confirm', credential: 'customer', money: 'no-api-keys' },
  { method: 'GET', template: '/v1/transactions', purpose: 'customer.account.view', resource: 'transaction', action: 'transaction.read', credential: 'customer' },
  { method: 'GET', template: '/v1/accounts', purpose: 'customer.account.view', resource: 'account', action: 'account.read', credential: 'customer' },
  { method: 'POST', template: '/v1/beneficiaries', purpose: 'customer.beneficiary.manage', resource: 'beneficiary', action: 'beneficiary.create', credential: 'customer' },
  { method: 'GET', template: '/v1/beneficiaries', purpose: 'customer.beneficiary.manage', resource: 'beneficiary', action: 'beneficiary.list', credential: 'customer' },
  { method: 'DELETE', template: '/v1/beneficiaries/{id}', purpose: 'customer.beneficiary.manage', resource: 'beneficiary', action: 'beneficiary.delete', credential: 'customer' },
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
  identity('GET', '/customers/devices', 'device.list', 'customer'),
  identity('DELETE', '/customers/devices/{id}', 'device.revoke', 'customer'),
  // core banking ledger (SPEC 4.1, 5.1; issue 5): core client tokens, scope checked at the edge and in core
  { method: 'POST', template: '/oauth2/token', purpose: operationalPurpose, resource: 'oauth', action: 'token.issue', credential: 'public' },
  core('POST', '/v1/core/accounts', 'account', 'account.create'),
  core('GET', '/v1/core/accounts/{id}', 'account', 'account.read'),
  core('GET', '/v1/core/accounts/{id}/balances', 'account', 'balance.read'),
  core('POST', '/v1/core/accounts/{id}/close', 'account', 'account.close'),
  core('POST', '/v1/core/postings', 'posting', 'posting.create', 'request'),
  core('GET', '/v1/core/postings/{id}', 'posting', 'posting.read'),
  core('POST', '/v1/core/postings/{id}/reverse', 'posting', 'posting.reverse', 'ledger'),
  core('POST', '/v1/core/holds', 'hold', 'hold.create', 'request'),
  core('GET', '/v1/core/holds/{id}', 'hold', 'hold.read'),
  core('POST', '/v1/core/holds/{id}/capture', 'hold', 'hold.capture', 'ledger'),
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
  // administration and reference API (SPEC 4.6; issue 6)
  admin('GET', '/v1/countries:reference', 'reference', 'reference.countries_reference'),
  admin('GET', '/v1/reference/timezones', 'reference', 'reference.reference_timezones'),
  admin('GET', '/v1/reference/regions', 'reference', 'reference.reference_regions'),
  admin('GET', '/v1/reference/locales', 'reference', 'reference.reference_locales'),
  admin('POST', '/v1/validate/country', 'reference', 'reference.validate_country'),
  admin('GET', '/v1/countries', 'country', 'country.list_countries'),
  admin('POST', '/v1/countries', 'country', 'country.create_country'),
  admin('GET', '/v1/countries/{code}', 'country', 'country.get_country'),
  admin('PATCH', '/v1/countries/{code}', 'country', 'country.update_country'),
  admin('DELETE', '/v1/countries/{code}', 'country', 'country.delete_country'),
  admin('GET', '/v1/countries/{code}/history', 'country', 'country.country_history'),
  admin('GET', '/v1/currencies', 'currency', 'currency.list_currencies'),
  admin('POST', '/v1/currencies', 'currency', 'currency.create_currency'),
  admin('GET', '/v1/currencies/{code}', 'currency', 'currency.get_currency'),
  admin('PATCH', '/v1/currencies/{code}', 'currency', 'currency.update_currency'),
  admin('DELETE', '/v1/currencies/{code}', 'currency', 'currency.delete_currency'),
  admin('GET', '/v1/countries/{code}/currencies', 'country', 'country.country_currencies'),
  admin('PUT', '/v1/countries/{code}/currencies/base', 'country', 'country.set_base_currency'),
  admin('PUT', '/v1/countries/{code}/currencies/allowed', 'country', 'country.set_allowed_currencies'),
  admin('GET', '/v1/countries/{code}/config', 'country', 'country.get_country_config'),
  admin('PUT', '/v1/countries/{code}/config', 'country', 'country.put_country_config'),
  admin('GET', '/v1/tenants', 'tenant', 'tenant.list_tenants'),
  admin('POST', '/v1/tenants', 'tenant', 'tenant.create_tenant'),
  admin('GET', '/v1/tenants/{tenantId}', 'tenant', 'tenant.get_tenant'),
  admin('PATCH', '/v1/tenants/{tenantId}', 'tenant', 'tenant.update_tenant'),
  admin('POST', '/v1/tenants/{tenantId}:suspend', 'tenant', 'tenant.suspend_tenant'),
  admin('POST', '/v1/tenants/{tenantId}:activate', 'tenant', 'tenant.activate_tenant'),
  admin('GET', '/v1/tenants/{tenantId}/environments', 'environment', 'environment.list_environments'),
  admin('POST', '/v1/tenants/{tenantId}/environments', 'environment', 'environment.create_environment'),
  admin('POST', '/v1/tenants/{tenantId}/environments:promote', 'environment', 'environment.promote_environment'),
  admin('GET', '/v1/tenants/{tenantId}/environments/{envId}', 'environment', 'environment.get_environment'),
  admin('PATCH', '/v1/tenants/{tenantId}/environments/{envId}', 'environment', 'environment.update_environment'),
  admin('GET', '/v1/tenants/{tenantId}/environments/{envId}/audit', 'environment', 'environment.environment_audit'),
  admin('GET', '/v1/products', 'product', 'product.list_products'),
  admin('POST', '/v1/products', 'product', 'product.create_product'),
  admin('GET', '/v1/products/{code}', 'product', 'product.get_product'),
  admin('PATCH', '/v1/products/{code}', 'product', 'product.update_product'),
  admin('DELETE', '/v1/products/{code}', 'product', 'product.delete_product'),
  admin('GET', '/v1/configs/effective', 'config', 'config.effective_config'),
  admin('POST', '/v1/configs:dry-run', 'config', 'config.dry_run_config'),
  admin('GET', '/v1/configs', 'config', 'config.list_configs'),
  admin('POST', '/v1/configs', 'config', 'config.create_config'),
  admin('POST', '/v1/configs:promote', 'config', 'config.promote_configs'),
  admin('GET', '/v1/configs/{configId}', 'config', 'config.get_config'),
  admin('PATCH', '/v1/configs/{configId}', 'config', 'config.update_config'),
  admin('GET', '/v1/schedules', 'schedule', 'schedule.list_schedules'),
  admin('POST', '/v1/schedules', 'schedule', 'schedule.create_schedule'),
  admin('GET', '/v1/schedules:effective', 'schedule', 'schedule.effective_schedule'),
  admin('POST', '/v1/schedules:validate', 'schedule', 'schedule.validate_schedule'),
  admin('POST', '/v1/schedules:promote', 'schedule', 'schedule.promote_schedules'),
  admin('GET', '/v1/schedules/{scheduleId}', 'schedule', 'schedule.get_schedule'),
  admin('PATCH', '/v1/schedules/{scheduleId}', 'schedule', 'schedule.update_schedule'),
  admin('DELETE', '/v1/schedules/{scheduleId}', 'schedule', 'schedule.delete_schedule'),
  admin('POST', '/v1/schedules/{scheduleId}/fees', 'schedule', 'schedule.add_fee_tiers'),
  admin('POST', '/v1/schedules/{scheduleId}/limits', 'schedule', 'schedule.add_limit_rows'),
  admin('POST', '/v1/fees:quote', 'schedule', 'schedule.quote_fee'),
  admin('POST', '/v1/limits:check', 'schedule', 'schedule.check_limit'),
  admin('GET', '/v1/flags', 'flag', 'flag.list_flags'),
  admin('PUT', '/v1/flags/{flagKey}', 'flag', 'flag.put_flag'),
  admin('GET', '/v1/flags/effective', 'flag', 'flag.effective_flags'),
  admin('GET', '/v1/outbox', 'outbox', 'outbox.list_outbox'),
  admin('GET', '/v1/outbox/{id}', 'outbox', 'outbox.get_outbox'),
  admin('POST', '/v1/outbox/{id}:retry', 'outbox', 'outbox.retry_outbox'),
  admin('POST', '/v1/outbox:retry-batch', 'outbox', 'outbox.retry_outbox_batch'),
  admin('GET', '/v1/idempotency', 'idempotency', 'idempotency.search_idempotency'),
  admin('GET', '/v1/idempotency/{key}', 'idempotency', 'idempotency.get_idempotency'),
  admin('DELETE', '/v1/idempotency/{key}', 'idempotency', 'idempotency.purge_idempotency'),
  admin('POST', '/v1/admin/rotate-keys', 'signing_key', 'signing_key.rotate_keys'),
  admin('GET', '/v1/audit', 'audit', 'audit.list_audit'),
  admin('GET', '/v1/audit:verify', 'audit', 'audit.verify_audit_chain'),
  admin('GET', '/v1/audit/{id}', 'audit', 'audit.get_audit'),
  admin('GET', '/v1/webhooks', 'webhook', 'webhook.list_webhooks'),
  admin('POST', '/v1/webhooks', 'webhook', 'webhook.create_webhook'),
  admin('GET', '/v1/webhooks/{id}', 'webhook', 'webhook.get_webhook'),
  admin('PATCH', '/v1/webhooks/{id}', 'webhook', 'webhook.update_webhook'),
  admin('DELETE', '/v1/webhooks/{id}', 'webhook', 'webhook.delete_webhook'),
  admin('POST', '/v1/webhooks/{id}:test', 'webhook', 'webhook.test_webhook'),
  // staff passkeys, enrolment and step-up (issue 16); the sign-in page and its assets
  staffAuth('POST', '/auth/login', 'staff.login'),
  staffAuth('POST', '/auth/enrolment/begin', 'staff.enrol'),
  staffAuth('POST', '/auth/enrolment/finish', 'staff.enrol'),
  staffAuth('GET', '/auth/passkeys', 'staff.passkeys'),
  staffAuth('PATCH', '/auth/passkeys/{id}', 'staff.passkeys'),
  staffAuth('DELETE', '/auth/passkeys/{id}', 'staff.passkeys'),
  staffAuth('GET', '/auth/sessions', 'staff.sessions'),
  staffAuth('POST', '/auth/logout', 'staff.logout'),
  staffAuth('POST', '/auth/mfa/challenge', 'staff.mfa_challenge'),
  staffAuth('POST', '/auth/mfa/complete', 'staff.mfa_complete'),
  staffAuth('GET', '/staff', 'staff.page'),
  staffAuth('GET', '/staff/assets/{asset}', 'staff.page'),
  // an Admin re-issues a lost passkey's enrolment link (AAL 2 at the edge: the step-up policy)
  admin('POST', '/v1/staff/users/{id}/enrolment-links', 'staff_user', 'enrolment.reissue'),
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
