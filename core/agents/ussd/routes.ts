/** /v1/ussd/* (SPEC 4.5 ussd group): the customer session and the agent menu, for the USSD gateway (purpose ussd.gateway). */
import { defineRoute, type RouteSpec } from '../../http/route.ts';
import type { AgentDeps } from '../context.ts';
import { agentMenu, agentRoute } from './agent.ts';
import { customerMenu, customerRoute } from './customer.ts';
import { answersOf, gatewayTenant, guarded, UssdForm } from './protocol.ts';
import { declared } from '../../http/declared.ts';

const tags = ['ussd'];
// Checked by the edge (service token with role ussd); core reads the identity the edge vouched for.
const headers = [
  {
    name: 'Authorization',
    required: false,
    description: 'Bearer <service token with role ussd> (the USSD gateway), verified at the edge',
  },
];
const responses = {
  200: {
    description: 'text/plain reply starting "CON " (more input) or "END " (session over)',
    contentType: 'text/plain',
  },
};

export function ussdRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', customerRoute),
      operationId: 'ussdSession',
      tags,
      headers,
      body: UssdForm,
      bodyKind: 'form',
      responses,
      summary:
        'Customer USSD session: 1 balance, 2 send money, 3 approve a cash-out, 4 mini statement (PIN verified like a login)',
      handler: async (ctx) => {
        const tenantId = gatewayTenant(ctx);
        return guarded(deps, ctx, ctx.body, (text) =>
          customerMenu(deps, ctx, tenantId, ctx.body, answersOf(text)),
        );
      },
    }),
    defineRoute({
      ...declared('POST', agentRoute),
      operationId: 'ussdAgentMenu',
      tags,
      headers,
      body: UssdForm,
      bodyKind: 'form',
      responses,
      summary: 'Agent USSD menu: 1 float balance, 2 cash-in (agent PIN verified like its app login)',
      handler: async (ctx) => {
        const tenantId = gatewayTenant(ctx);
        return guarded(deps, ctx, ctx.body, (text) =>
          agentMenu(deps, ctx, tenantId, ctx.body, answersOf(text)),
        );
      },
    }),
  ];
}
