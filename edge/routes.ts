/**
 * The edge's route table (SPEC 4.3 rule 1): method + route template → purpose, resource type,
 * action and the credential the route needs. The purpose is always derived here; a client-sent
 * purpose header is ignored and overwritten. A path with no entry gets `operational`, which
 * allows only what the policy says it allows.
 * The entries are the route declarations (shared/routes/; issue 21 item 1) as the signed policy
 * bundle ships them (`routes.json`, verified with the policy: policy/runtime/bundle.ts): the
 * edge decides with the current bundle's table, swapped with the policy, and never imports the
 * declarations itself.
 */
import type { PolicyStore } from '../policy/runtime/store.ts';
import type { ErrorFormat } from '../shared/errors.ts';
import { TemplateTable, familyFormats } from '../shared/path-template.ts';
import { operationalPurpose, type RouteDeclaration } from '../shared/routes/types.ts';

export type { Credential } from '../shared/routes/types.ts';
export { operationalPurpose } from '../shared/routes/types.ts';
/** One entry of the table: a route declaration. */
export type EdgeRoute = RouteDeclaration;

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

export type ResolveRoute = (method: string, path: string) => ResolvedRoute;

export function buildRouteTable(routes: readonly EdgeRoute[]): ResolveRoute {
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

/** Tables built per policy revision: a revision's table is built once, on its first Check. */
const tables = new WeakMap<readonly EdgeRoute[], ResolveRoute>();

/**
 * The route table of the current policy bundle, following every hot swap. Without a current
 * bundle, or one that carries no table, it throws: the Check fails closed (SPEC 1).
 */
export function bundleRouteTable(policies: Pick<PolicyStore, 'current'>): ResolveRoute {
  return (method, path) => {
    const routes = policies.current?.routes;
    if (!routes) throw new Error('the policy bundle carries no route table');
    let resolve = tables.get(routes);
    if (!resolve) {
      resolve = buildRouteTable(routes);
      tables.set(routes, resolve);
    }
    return resolve(method, path);
  };
}
