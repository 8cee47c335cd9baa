/**
 * Decision and simulation (SPEC 4.4; core/authz/) and policy impact (issue 22; core/policy/):
 * staff routes whose roles the registry names per action.
 */
import { opsOrAdmin, type RouteDeclaration, staffRoute } from './types.ts';

const authz = (method: string, template: string, action: string): RouteDeclaration =>
  staffRoute(method, template, 'authz', action, opsOrAdmin);

/** Issue 22: policy authors, ops and admins. */
export const policyAuthors = ['policy_author', 'ops', 'admin'] as const;

const impact = (method: string, template: string, action: string): RouteDeclaration =>
  staffRoute(method, template, 'policy', action, policyAuthors);

export const policyRoutes: RouteDeclaration[] = [
  // decision and simulation (SPEC 4.4): staff with the ops role
  authz('POST', '/authz/decision', 'authz.decide'),
  authz('POST', '/authz/simulate', 'authz.simulate'),
  authz('GET', '/v1/auth/simulate', 'authz.simulate'),
  authz('POST', '/v1/auth/simulate', 'authz.simulate'),
  // Issue 22: policy impact. The candidate upload carries a whole bundle (the WASM alone is far
  // past 8192 bytes) and its decision needs no body field.
  {
    ...impact('POST', '/v1/policy/candidates', 'policy.candidate_upload'),
    disableRequestBodyBuffering: true,
  },
  impact('GET', '/v1/policy/candidates', 'policy.candidate_list'),
  impact('DELETE', '/v1/policy/candidates/{ref}', 'policy.candidate_delete'),
  impact('POST', '/v1/policy/impact', 'policy.impact_run'),
  impact('GET', '/v1/policy/impact/{id}', 'policy.impact_read'),
  impact('PUT', '/v1/policy/shadow', 'policy.shadow_set'),
  impact('GET', '/v1/policy/shadow', 'policy.shadow_read'),
  impact('DELETE', '/v1/policy/shadow', 'policy.shadow_clear'),
];
