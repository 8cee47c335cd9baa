/**
 * Every route the platform serves, declared once (issue 21 item 1; see ./types.ts), one file per
 * domain. Read by core (its routes take method, path and roles from here), by policy/build.ts
 * (the edge's route table in the signed bundle) and by the suite; never by the edge's decision
 * path, which uses the bundle's copy.
 */
import { adminRoutes } from './admin.ts';
import { agentRoutes } from './agents.ts';
import { clientRoutes } from './clients.ts';
import { identityRoutes, staffAuthRoutes } from './identity.ts';
import { ledgerRoutes } from './ledger.ts';
import { oversightRoutes } from './oversight.ts';
import { paymentRoutes } from './payments.ts';
import { platformRoutes } from './platform.ts';
import { policyRoutes } from './policy.ts';
import { scimRoutes } from './scim.ts';
import type { RouteDeclaration } from './types.ts';

export type { Credential, RouteDeclaration } from './types.ts';

export const routeDeclarations: readonly RouteDeclaration[] = [
  ...platformRoutes,
  ...policyRoutes,
  ...paymentRoutes,
  ...clientRoutes,
  ...identityRoutes,
  ...staffAuthRoutes,
  ...ledgerRoutes,
  ...agentRoutes,
  ...adminRoutes,
  ...oversightRoutes,
  ...scimRoutes,
];

const byKey = new Map(routeDeclarations.map((r) => [`${r.method} ${r.template}`, r]));

/** The declaration of `method path`; a route nobody declared is a programming error, refused at start. */
export function declarationOf(method: string, path: string): RouteDeclaration {
  const d = byKey.get(`${method} ${path}`);
  if (!d) throw new Error(`route ${method} ${path} has no declaration in shared/routes/`);
  return d;
}

/** The route table the policy bundle ships (`routes.json`): the declarations as plain data. */
export function routeTableDocument(): { routes: RouteDeclaration[] } {
  return { routes: [...routeDeclarations] };
}
