/** Every agent operations route (SPEC 4.5; issue 9), in one list for core/app.ts. */
import type { RouteSpec } from '../http/route.ts';
import { agentAuthRoutes } from './auth-routes.ts';
import type { AgentDeps } from './context.ts';
import { disputeRoutes } from './disputes.ts';
import { contentRoutes } from './content.ts';
import { kycRoutes } from './kyc.ts';
import { agentMoneyRoutes } from './money-routes.ts';
import { profileRoutes } from './profile.ts';
import { trainingRoutes } from './training.ts';
import { txnRoutes } from './txn-routes.ts';
import { ussdRoutes } from './ussd/routes.ts';

export type { AgentDeps } from './context.ts';

export function agentRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    ...agentAuthRoutes(deps),
    ...kycRoutes(deps),
    ...txnRoutes(deps),
    ...agentMoneyRoutes(deps),
    ...profileRoutes(deps),
    ...contentRoutes(deps),
    ...trainingRoutes(deps),
    ...disputeRoutes(deps),
    ...ussdRoutes(deps),
  ];
}
