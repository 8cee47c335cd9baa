/**
 * What core's OpenAPI document needs from outside core (issue 15 item 3), handed over by the
 * composition root: core and edge never import each other, so this lookup of the edge's route
 * table (each route's credential, purpose and action) comes from here; and, in development, the
 * demo seed's values that the docs page pre-fills. A route the edge does not map gets no security.
 */
import type { AccessLookup, EdgeAccess } from '../core/http/openapi-security.ts';
import type { DocExamples } from '../core/http/openapi-examples.ts';
import type { EdgeRoute } from '../edge/routes.ts';
import { routeDeclarations } from '../shared/routes/index.ts';

export function edgeRouteAccess(routes: readonly EdgeRoute[] = routeDeclarations): AccessLookup {
  // Core's route templates are the edge's, character for character (test/edge/routes.test.ts).
  const byKey = new Map<string, EdgeAccess>(
    routes.map((r) => [
      `${r.method} ${r.template}`,
      { credential: r.credential, purpose: r.purpose, action: r.action },
    ]),
  );
  return (method, template) => byKey.get(`${method} ${template}`);
}

function field(obj: unknown, ...path: string[]): unknown {
  let v = obj;
  for (const key of path) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[key] : undefined;
  return v;
}

/**
 * The demo seed's ids by the names parameters and body properties give them. Identifiers only:
 * never a secret (PINs, client secrets and tokens stay in demo.json, which the page points to).
 */
export function demoDocExamples(demo: Record<string, unknown>): DocExamples {
  const tenant = field(demo, 'tenant', 'id');
  const candidates: Record<string, unknown> = {
    tenantId: tenant,
    tenant_id: tenant,
    country: field(demo, 'tenant', 'country'),
    currency: field(demo, 'tenant', 'baseCurrency'),
    baseCurrency: field(demo, 'tenant', 'baseCurrency'),
    phone: field(demo, 'customer', 'phone'),
    customerId: field(demo, 'customer', 'customerId'),
    customer_id: field(demo, 'customer', 'customerId'),
    agentCode: field(demo, 'agent', 'agentCode'),
    agentId: field(demo, 'agent', 'agentId'),
    agent_id: field(demo, 'agent', 'agentId'),
    // The agent's session is bound to its device; a customer may name any device id.
    'X-Device-Id': field(demo, 'agent', 'deviceId'),
    grant_type: 'client_credentials',
    client_id: field(demo, 'coreClient', 'clientId'),
  };
  return Object.freeze(
    Object.fromEntries(Object.entries(candidates).filter(([, v]) => typeof v === 'string')),
  );
}
