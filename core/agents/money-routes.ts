/** Float, commissions, wallets and reports routes of the agent API (issue 9 items 5-7, 9), for routes.ts. */
import type { RouteSpec } from '../http/route.ts';
import { commissionRoutes } from './commission-routes.ts';
import type { AgentDeps } from './context.ts';
import { floatRoutes } from './float-routes.ts';
import { reportRoutes } from './report-routes.ts';
import { walletRoutes } from './wallets.ts';

export function agentMoneyRoutes(deps: AgentDeps): RouteSpec[] {
  return [...floatRoutes(deps), ...commissionRoutes(deps), ...walletRoutes(deps), ...reportRoutes(deps)];
}
