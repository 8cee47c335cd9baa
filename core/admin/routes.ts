/** Every administration route (SPEC 4.6; issue 6), built over the shared conventions of ./http.ts. */
import type { Db } from '../../shared/db/pool.ts';
import type { RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { auditRoutes } from './audit/query.ts';
import { configRoutes } from './configs/routes.ts';
import { currencyRoutes } from './countries/currencies.ts';
import { countryRoutes } from './countries/routes.ts';
import { flagRoutes } from './flags/routes.ts';
import type { AdminDeps } from './http.ts';
import { cursorsOf } from '../http/cursor.ts';
import { opsRoutes } from './ops/routes.ts';
import { RateLimiter, type RateLimits } from './rate-limit.ts';
import { referenceRoutes } from './reference/routes.ts';
import { scheduleRoutes } from './schedules/routes.ts';
import { environmentRoutes, productRoutes } from './tenants/environments.ts';
import { tenantRoutes } from './tenants/routes.ts';
import { webhookRoutes } from './webhooks/routes.ts';
import { staffAdminRoutes } from '../staff/admin-routes.ts';
import { enrolmentAdminRoutes } from '../staff/enrolment-admin.ts';
import { TargetGuard } from './webhooks/target.ts';
import { sessionAdminRoutes } from '../staff/sessions-admin.ts';
import { identityProviderRoutes } from '../staff/idp.ts';
// tenant onboarding (issue 20 item 1)
import { firstAdminRoutes } from './onboarding/first-admin.ts';
import { securityRoutes } from './onboarding/security.ts';
import { templateRoutes } from './onboarding/templates.ts';
import { agentReadRoutes } from '../agents/admin-reads.ts';
import { agentAdminRoutes } from '../agents/admin-routes.ts';
import type { IdentityDeps } from '../identity/context.ts';
// issue 20 item 3: relationship tuples
import { tupleRoutes } from './tuples/routes.ts';

/**
 * `allowPrivateWebhookTargets`: tests and the development stack only (see ./webhooks/target.ts).
 * `webhookAllowedCidrs`: the internal receivers an operator lists (PRIVATE_TARGETS_ALLOWED), so an
 * endpoint the dispatcher may deliver to can also be created (issue 23 item 5).
 */
export function adminRoutes(opts: {
  db: Db;
  keys: KeyStore;
  now: () => number;
  rateLimits?: RateLimits;
  allowPrivateWebhookTargets?: boolean;
  webhookAllowedCidrs?: string[];
  targets?: TargetGuard;
  identity?: IdentityDeps;
}): RouteSpec[] {
  const deps: AdminDeps = {
    db: opts.db,
    keys: opts.keys,
    now: opts.now,
    limiter: new RateLimiter(opts.db, opts.rateLimits),
    pages: cursorsOf(opts.db, opts.keys),
    webhookTargets:
      opts.targets ??
      new TargetGuard({
        allowPrivateTargets: opts.allowPrivateWebhookTargets ?? false,
        allowedCidrs: opts.webhookAllowedCidrs ?? [],
      }),
  };
  return [
    ...referenceRoutes(deps),
    ...countryRoutes(deps),
    ...currencyRoutes(deps),
    ...tenantRoutes(deps),
    ...environmentRoutes(deps),
    ...productRoutes(deps),
    ...configRoutes(deps),
    ...scheduleRoutes(deps),
    ...flagRoutes(deps),
    ...opsRoutes(deps),
    ...auditRoutes(deps),
    ...webhookRoutes(deps),
    ...staffAdminRoutes(deps),
    ...sessionAdminRoutes(deps),
    ...identityProviderRoutes(deps),
    ...enrolmentAdminRoutes(deps),
    // tenant onboarding (issue 20 item 1); agents need identity's PIN hasher and peppers
    ...firstAdminRoutes(deps),
    ...securityRoutes(deps),
    ...templateRoutes(deps),
    ...(opts.identity ? agentAdminRoutes(deps, opts.identity) : []),
    ...agentReadRoutes(deps),
    // issue 20 item 3: relationship tuples
    ...tupleRoutes(deps),
  ];
}
