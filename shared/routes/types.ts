/**
 * One declaration per route (issue 21 item 1): method, route template, purpose, resource type,
 * action, the credential it needs and the roles the registry grants it, with its money movement,
 * error format and body buffering. Core's routes take their method, path and roles from these;
 * `policy/build.ts` ships them in the signed policy bundle as the edge's route table
 * (`routes.json`), so the edge decides from the bundle's copy and never imports this module.
 * test/edge/routes.test.ts keeps them, core's routes and the purpose registry in step.
 */
import type { MoneyMovement } from '../api-key-budget.ts';
import type { ErrorFormat } from '../errors.ts';

/** What proves who the caller is. `public`: nothing (rate limited where it matters). */
export type Credential = 'public' | 'customer' | 'service' | 'staff' | 'core-client' | 'agent' | 'scim';

export interface RouteDeclaration {
  method: string;
  template: string;
  purpose: string;
  resource: string;
  action: string;
  credential: Credential;
  /**
   * The roles that may call the route (any one suffices): the registry's `required_roles` of the
   * purpose or `role_actions` of the action, checked against it in the suite; core checks the
   * same roles again. Absent where no role is needed (customers, public routes, core clients).
   */
  roles?: readonly string[];
  /**
   * Envoy's per-route `check_settings.disable_request_body_buffering`: Check sees headers only
   * (an empty body) and the body streams to core unbuffered and unlimited by the edge's 8192
   * bytes, so core must enforce its size and type. For uploads; never for routes whose
   * decision needs the body (tenant in the body, signed requests, request-bound step-up).
   */
  disableRequestBodyBuffering?: true;
  /**
   * Set on every route that moves money: how an API key's daily amount budget counts it
   * (shared/api-key-budget.ts; SPEC 5.4.5, issue 13 item 5). Core's route takes it from here
   * (`movesMoney`) and refuses to move money without it.
   */
  money?: MoneyMovement;
  /**
   * The audience's error format (issue 15 item 5): `problem` on the administration API, whose
   * refusals are Problem+JSON (SPEC 7.3) whether the edge, the dev gateway or core refuses;
   * `scim` on SCIM; `{code, message}` (SPEC 2.2) when absent.
   */
  errorFormat?: ErrorFormat;
}

export const operationalPurpose = 'operational';

/** An operational route for staff (a person's token or a service token) holding one of `roles`. */
export const staffRoute = (
  method: string,
  template: string,
  resource: string,
  action: string,
  roles: readonly string[],
): RouteDeclaration => ({
  method,
  template,
  purpose: operationalPurpose,
  resource,
  action,
  credential: 'staff',
  roles,
});

/** A route a customer calls with their own access token. */
export const customerRoute = (
  method: string,
  template: string,
  purpose: string,
  resource: string,
  action: string,
): RouteDeclaration => ({ method, template, purpose, resource, action, credential: 'customer' });

/** Staff roles (SPEC 4.6): the role sets the registry grants, named once. */
export const readers = ['admin', 'ops', 'readonly'] as const;
/** Operational repairs (outbox retry, idempotency, chain verification), API keys and OAuth clients read. */
export const operators = ['admin', 'ops'] as const;
export const admins = ['admin'] as const;
/** SPEC 4.6: idempotency search is "ops only". */
export const opsOnly = ['ops'] as const;
/** Decision and simulation (SPEC 4.4), agent operations by staff (SPEC 4.5). */
export const opsOrAdmin = ['ops', 'admin'] as const;
