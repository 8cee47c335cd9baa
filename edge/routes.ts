/**
 * The edge's one route table (SPEC 4.3 rule 1): method + route template → purpose, resource
 * type, action and the credential the route needs. The purpose is always derived here; a
 * client-sent purpose header is ignored and overwritten. A path with no entry gets
 * `operational`, which allows only what the policy says it allows.
 * Every feature adds its routes here; a test keeps this table and core's routes in step.
 */
import type { MoneyMovement } from '../shared/api-key-budget.ts';
import type { ErrorFormat } from '../shared/errors.ts';
import { TemplateTable, familyFormats } from '../shared/path-template.ts';
import { agentEdgeRoutes } from './agent-routes.ts';

/** What proves who the caller is. `public`: nothing (rate limited where it matters). */
export type Credential = 'public' | 'customer' | 'service' | 'staff' | 'core-client' | 'agent' | 'scim';

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
  method,
  template,
  purpose: operationalPurpose,
  resource: 'platform',
  action: 'platform.read',
  credential: 'public',
});

const identity = (method: string, template: string, action: string, credential: Credential): EdgeRoute => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'customer_auth',
  action,
  credential,
});

const core = (
  method: string,
  template: string,
  resource: string,
  action: string,
  money?: MoneyMovement,
): EdgeRoute => ({
  method,
  template,
  purpose: 'core.banking',
  resource,
  action,
  credential: 'core-client',
  ...(money ? { money } : {}),
});

const authz = (method: string, template: string, action: string): EdgeRoute => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'authz',
  action,
  credential: 'staff',
});

/** Administration API (SPEC 4.6, 5.5; issue 6): staff credentials, roles per action in the registry, checked again in core. */
const admin = (method: string, template: string, resource: string, action: string): EdgeRoute => ({
  method,
  template,
  purpose: operationalPurpose,
  resource,
  action,
  credential: 'staff',
  errorFormat: 'problem',
});

const staffPurpose = (
  method: string,
  template: string,
  purpose: string,
  resource: string,
  action: string,
): EdgeRoute => ({
  method,
  template,
  purpose,
  resource,
  action,
  credential: 'staff',
});

/**
 * Issue 20 item 4: the staff purposes of the signed registry reachable through the gateway.
 * The purpose is fixed per route, so a support agent's lookup is always masked and a fraud
 * officer's always at AAL 2; consents are the customer's own (operational, customer token).
 */
const staffPurposeRoutes: EdgeRoute[] = [
  staffPurpose('GET', '/v1/support/customers', 'support.investigate', 'customer', 'customer.read'),
  staffPurpose('GET', '/v1/fraud/customers', 'fraud.review', 'customer', 'customer.read'),
  staffPurpose('GET', '/v1/fraud/holds', 'fraud.review', 'fraud_hold', 'fraud_hold.read'),
  staffPurpose('POST', '/v1/fraud/holds', 'fraud.review', 'fraud_hold', 'fraud_hold.place'),
  staffPurpose('POST', '/v1/fraud/holds/{id}:lift', 'fraud.review', 'fraud_hold', 'fraud_hold.lift'),
  staffPurpose(
    'GET',
    '/v1/compliance/customers/{customerId}/kyc',
    'compliance.kyc',
    'kyc_customer',
    'kyc.read',
  ),
  staffPurpose('GET', '/v1/analytics/aggregates', 'analytics.aggregate', 'aggregate', 'aggregate.read'),
  {
    method: 'GET',
    template: '/v1/marketing/offers',
    purpose: 'marketing.personalize',
    resource: 'offer',
    action: 'offer.read',
    credential: 'customer',
  },
  {
    method: 'GET',
    template: '/v1/consents',
    purpose: operationalPurpose,
    resource: 'consent',
    action: 'consent.list',
    credential: 'customer',
  },
  {
    method: 'PUT',
    template: '/v1/consents/{purpose}',
    purpose: operationalPurpose,
    resource: 'consent',
    action: 'consent.grant',
    credential: 'customer',
  },
  {
    method: 'DELETE',
    template: '/v1/consents/{purpose}',
    purpose: operationalPurpose,
    resource: 'consent',
    action: 'consent.withdraw',
    credential: 'customer',
  },
];

/**
 * SCIM 2.0 provisioning (issue 14 item 1): the identity provider's SCIM client with the tenant's
 * SCIM bearer credential, which alone sets the tenant; SCIM error bodies (RFC 7644 3.12).
 */
const scim = (method: string, path: string, action: 'scim.read' | 'scim.write'): EdgeRoute => ({
  method,
  template: `/scim/v2${path}`,
  purpose: operationalPurpose,
  resource: 'scim',
  action,
  credential: 'scim',
  errorFormat: 'scim',
});

/**
 * Staff sign-in and tokens (SPEC 4.4; issues 14, 16): public at the edge like customer sign-in.
 * Routes acting for a signed-in person (passkeys, sessions, sign-out, step-up) carry the staff
 * access token, which core verifies itself (core/staff/auth.ts).
 */
const staffAuth = (method: string, template: string, action: string): EdgeRoute => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'staff_auth',
  action,
  credential: 'public',
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
  // Issue 22: policy impact (roles policy_author, ops, admin). The candidate upload carries a
  // whole bundle (the WASM alone is far past 8192 bytes) and its decision needs no body field.
  {
    method: 'POST',
    template: '/v1/policy/candidates',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.candidate_upload',
    credential: 'staff',
    disableRequestBodyBuffering: true,
  },
  {
    method: 'GET',
    template: '/v1/policy/candidates',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.candidate_list',
    credential: 'staff',
  },
  {
    method: 'DELETE',
    template: '/v1/policy/candidates/{ref}',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.candidate_delete',
    credential: 'staff',
  },
  {
    method: 'POST',
    template: '/v1/policy/impact',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.impact_run',
    credential: 'staff',
  },
  {
    method: 'GET',
    template: '/v1/policy/impact/{id}',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.impact_read',
    credential: 'staff',
  },
  {
    method: 'PUT',
    template: '/v1/policy/shadow',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.shadow_set',
    credential: 'staff',
  },
  {
    method: 'GET',
    template: '/v1/policy/shadow',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.shadow_read',
    credential: 'staff',
  },
  {
    method: 'DELETE',
    template: '/v1/policy/shadow',
    purpose: operationalPurpose,
    resource: 'policy',
    action: 'policy.shadow_clear',
    credential: 'staff',
  },
  // customer money (SPEC 4.3; issue 7): purposes fixed here, never taken from the client
  {
    method: 'POST',
    template: '/v1/transfers',
    purpose: 'customer.transact',
    resource: 'transaction',
    action: 'transfer.create',
    credential: 'customer',
    money: 'request',
  },
  {
    method: 'POST',
    template: '/v1/transfers/confirm',
    purpose: 'customer.transact',
    resource: 'transaction',
    action: 'transfer.confirm',
    credential: 'customer',
    money: 'no-api-keys',
  },
  {
    method: 'GET',
    template: '/v1/transactions',
    purpose: 'customer.account.view',
    resource: 'transaction',
    action: 'transaction.read',
    credential: 'customer',
  },
  {
    method: 'GET',
    template: '/v1/accounts',
    purpose: 'customer.account.view',
    resource: 'account',
    action: 'account.read',
    credential: 'customer',
  },
  {
    method: 'POST',
    template: '/v1/beneficiaries',
    purpose: 'customer.beneficiary.manage',
    resource: 'beneficiary',
    action: 'beneficiary.create',
    credential: 'customer',
  },
  {
    method: 'GET',
    template: '/v1/beneficiaries',
    purpose: 'customer.beneficiary.manage',
    resource: 'beneficiary',
    action: 'beneficiary.list',
    credential: 'customer',
  },
  {
    method: 'DELETE',
    template: '/v1/beneficiaries/{id}',
    purpose: 'customer.beneficiary.manage',
    resource: 'beneficiary',
    action: 'beneficiary.delete',
    credential: 'customer',
  },
  // API keys (SPEC 4.4): tenant admins manage their machine clients' keys
  {
    method: 'POST',
    template: '/api-keys',
    purpose: operationalPurpose,
    resource: 'api_key',
    action: 'apikey.create',
    credential: 'staff',
  },
  {
    method: 'GET',
    template: '/api-keys',
    purpose: operationalPurpose,
    resource: 'api_key',
    action: 'apikey.read',
    credential: 'staff',
  },
  {
    method: 'GET',
    template: '/api-keys/{id}',
    purpose: operationalPurpose,
    resource: 'api_key',
    action: 'apikey.read',
    credential: 'staff',
  },
  {
    method: 'DELETE',
    template: '/api-keys/{id}',
    purpose: operationalPurpose,
    resource: 'api_key',
    action: 'apikey.revoke',
    credential: 'staff',
  },
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
  identity('POST', '/auth/stepup/complete', 'auth.stepup', 'customer'),
  identity('GET', '/customers/sessions', 'session.list', 'customer'),
  identity('DELETE', '/customers/sessions/{id}', 'session.revoke', 'customer'),
  identity('POST', '/customers/devices', 'device.register', 'customer'),
  identity('GET', '/customers/devices', 'device.list', 'customer'),
  identity('DELETE', '/customers/devices/{id}', 'device.revoke', 'customer'),
  // staff sign-in and tokens (SPEC 4.4; issue 14 items 2-3)
  staffAuth('POST', '/auth/login', 'auth.staff_login'),
  staffAuth('GET', '/auth/callback', 'auth.staff_callback'),
  staffAuth('POST', '/auth/token', 'auth.staff_token'),
  // core banking ledger (SPEC 4.1, 5.1; issue 5): core client tokens, scope checked at the edge and in core
  {
    method: 'POST',
    template: '/oauth2/token',
    purpose: operationalPurpose,
    resource: 'oauth',
    action: 'token.issue',
    credential: 'public',
  },
  // issue 17: discovery (RFC 8414) and the registration of OAuth clients by tenant admins
  {
    method: 'GET',
    template: '/.well-known/oauth-authorization-server',
    purpose: operationalPurpose,
    resource: 'oauth',
    action: 'auth.oauth_metadata',
    credential: 'public',
  },
  {
    method: 'POST',
    template: '/v1/oauth-clients',
    purpose: operationalPurpose,
    resource: 'oauth_client',
    action: 'oauthclient.create',
    credential: 'staff',
  },
  {
    method: 'GET',
    template: '/v1/oauth-clients',
    purpose: operationalPurpose,
    resource: 'oauth_client',
    action: 'oauthclient.read',
    credential: 'staff',
  },
  {
    method: 'GET',
    template: '/v1/oauth-clients/{id}',
    purpose: operationalPurpose,
    resource: 'oauth_client',
    action: 'oauthclient.read',
    credential: 'staff',
  },
  {
    method: 'POST',
    template: '/v1/oauth-clients/{id}/rotate',
    purpose: operationalPurpose,
    resource: 'oauth_client',
    action: 'oauthclient.rotate',
    credential: 'staff',
  },
  {
    method: 'DELETE',
    template: '/v1/oauth-clients/{id}',
    purpose: operationalPurpose,
    resource: 'oauth_client',
    action: 'oauthclient.revoke',
    credential: 'staff',
  },
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
  admin(
    'POST',
    '/v1/tenants/{tenantId}/environments:promote',
    'environment',
    'environment.promote_environment',
  ),
  admin('GET', '/v1/tenants/{tenantId}/environments/{envId}', 'environment', 'environment.get_environment'),
  admin(
    'PATCH',
    '/v1/tenants/{tenantId}/environments/{envId}',
    'environment',
    'environment.update_environment',
  ),
  admin(
    'GET',
    '/v1/tenants/{tenantId}/environments/{envId}/audit',
    'environment',
    'environment.environment_audit',
  ),
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
  // staff purposes (issue 20 item 4; SPEC 2.5 intents): core/oversight/
  ...staffPurposeRoutes,
  // staff provisioning and machine credentials (issue 14 items 1, 6)
  admin('POST', '/v1/scim-credentials', 'scim_credential', 'scim_credential.issue'),
  admin('GET', '/v1/scim-credentials', 'scim_credential', 'scim_credential.list'),
  admin('DELETE', '/v1/scim-credentials/{id}', 'scim_credential', 'scim_credential.revoke'),
  admin('POST', '/v1/service-tokens', 'service_token', 'service_token.issue'),
  admin('GET', '/v1/service-tokens', 'service_token', 'service_token.list'),
  admin('POST', '/v1/service-tokens/{id}:rotate', 'service_token', 'service_token.rotate'),
  admin('DELETE', '/v1/service-tokens/{id}', 'service_token', 'service_token.revoke'),
  admin('GET', '/v1/staff/group-mappings', 'staff_group_mapping', 'staff_group_mapping.list'),
  admin('PUT', '/v1/staff/group-mappings', 'staff_group_mapping', 'staff_group_mapping.put'),
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
  // session administration (SPEC 4.4; issue 14 item 4): Admin and support list, Admin revokes
  admin('GET', '/sessions', 'session', 'session.admin_list'),
  admin('DELETE', '/sessions/{id}', 'session', 'session.admin_revoke'),
  // the tenant's identity provider for staff sign-in (issue 14 item 1)
  admin('GET', '/v1/identity-provider', 'identity_provider', 'idp.get_identity_provider'),
  admin('PUT', '/v1/identity-provider', 'identity_provider', 'idp.put_identity_provider'),
  // staff passkeys, enrolment and step-up (issue 16); the sign-in page and its assets
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
  // tenant onboarding (issue 20 item 1): platform admins issue an owned tenant's first Admin and
  // SCIM credential (owner_actions, AAL 2); its security settings; schedule templates; agents
  admin('POST', '/v1/tenants/{tenantId}/first-admin', 'tenant', 'tenant.issue_first_admin'),
  admin('POST', '/v1/tenants/{tenantId}/scim-credentials', 'tenant', 'tenant.issue_scim_credential'),
  admin('GET', '/v1/tenants/{tenantId}/security', 'tenant', 'tenant.get_security'),
  admin('PUT', '/v1/tenants/{tenantId}/security', 'tenant', 'tenant.put_security'),
  admin('POST', '/v1/schedule-templates', 'schedule_template', 'schedule_template.publish'),
  admin('GET', '/v1/schedule-templates', 'schedule_template', 'schedule_template.list'),
  admin('POST', '/v1/schedule-templates/{templateId}:copy', 'schedule_template', 'schedule_template.copy'),
  admin('POST', '/v1/outlets', 'outlet', 'outlet.create'),
  admin('POST', '/v1/agents', 'agent', 'agent.create'),
  // relationship tuples (issue 20 item 3; SPEC 2.7): core/admin/tuples/
  admin('GET', '/v1/tenants/{tenantId}/tuples', 'relationship_tuple', 'tuple.list_tuples'),
  admin('PUT', '/v1/tenants/{tenantId}/tuples', 'relationship_tuple', 'tuple.write_tuple'),
  admin('POST', '/v1/tenants/{tenantId}/tuples:delete', 'relationship_tuple', 'tuple.delete_tuple'),
];

export interface ResolvedRoute {
  route: EdgeRoute | undefined;
  /** The audience's error format: the route's, or for an unmapped path its family's (shared/path-template.ts). */
  errorFormat?: ErrorFormat;
  /** For an unmapped path: the methods the table serves on it (a 405 rather than a 404 where the audience wants one). */
  allowed?: string[];
  purpose: string;
  resource: string;
  action: string;
  params: Record<string, string>;
}

export function buildRouteTable(
  routes: EdgeRoute[] = edgeRoutes,
): (method: string, path: string) => ResolvedRoute {
  const table = new TemplateTable<EdgeRoute>();
  for (const r of routes) table.add(r.method, r.template, r);
  const formatOf = familyFormats<ErrorFormat>(
    routes.map((r) => ({ template: r.template, format: r.errorFormat })),
    'core',
  );
  return (method, path) => {
    const m = table.find(method, path);
    if (!m) {
      return {
        route: undefined,
        purpose: operationalPurpose,
        resource: 'unmapped',
        action: 'unmapped',
        params: {},
        errorFormat: formatOf(path),
        allowed: table.allowedMethods(path),
      };
    }
    return {
      route: m.entry,
      purpose: m.entry.purpose,
      resource: m.entry.resource,
      action: m.entry.action,
      params: m.params,
      ...(m.entry.errorFormat ? { errorFormat: m.entry.errorFormat } : {}),
    };
  };
}
