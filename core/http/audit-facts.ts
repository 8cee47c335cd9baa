/**
 * Issue 20 item 5 (SPEC 2.8): what every audit record core writes while serving a request
 * says about that request, built once here and attached by the pipeline (server.ts) rather than
 * by each route: the decision the edge made (policy and registry versions, purpose, AAL, trace
 * and decision ids) and the request's ip, ua and risk. Only headers carrying the edge's secret
 * are the edge's word; without it (a direct call to core) the record names the request id and
 * the socket peer only.
 */
import type { RequestAuditFacts } from '../../shared/audit.ts';
import type { EdgeIdentity } from './route.ts';

/** A user agent is the client's text: kept, but bounded so a record cannot be inflated by it. */
export const auditUaMaxChars = 256;

const risks = new Set(['low', 'medium', 'high']);

/** The audit facts of one request. */
export function auditFactsOf(
  headers: Readonly<Record<string, string>>,
  identity: EdgeIdentity,
  requestId: string,
  socketIp: string | undefined,
): RequestAuditFacts {
  const ua = (headers['user-agent'] ?? '').slice(0, auditUaMaxChars);
  if (!identity.fromEdge) {
    return { decision: { trace_id: requestId }, attrs: { ip: socketIp ?? 'unknown', ua } };
  }
  // The edge audits a service principal at AAL 1 and an anonymous caller at 0 (edge/authz.ts):
  // the same numbers here, so a request's edge record and core record agree.
  const aal = identity.aal ?? (identity.principalId !== undefined ? 1 : 0);
  const risk = headers['x-risk'];
  return {
    decision: {
      // The request reached core: the edge allowed it. A record stating its own outcome (a refused
      // login) overrides this with its own `allow`.
      allow: true,
      purpose: identity.purpose ?? '',
      policy_version: headers['x-policy-version'] ?? '',
      registry_version: headers['x-registry-version'] ?? '',
      aal,
      trace_id: requestId,
      decision_id: headers['x-decision-id'] ?? '',
    },
    attrs: {
      ip: identity.clientIp ?? socketIp ?? 'unknown',
      ua,
      risk: risk !== undefined && risks.has(risk) ? risk : 'unknown',
      masking: headers['x-masking'] ?? '{}',
      registry_version: headers['x-registry-version'] ?? '',
    },
  };
}
