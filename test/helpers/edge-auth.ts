/**
 * The edge shared secret of test-built cores (issue 23 item 4). Core requires one and reads
 * identity headers (x-tenant-id, x-roles, x-client-ip, …) only from requests carrying it in
 * `x-edge-auth`, as the edge sets it; tests that stand in for the edge send it the same way.
 */
import { randomBytes, randomUUID } from 'node:crypto';

export const testEdgeSecret = randomBytes(32).toString('base64url');

/** What every test-built core is given: the secret as production configures it. */
export const testEdgeSecrets: readonly string[] = [testEdgeSecret];

/** `headers` as the edge would forward them: with the shared secret in `x-edge-auth`. */
export function viaEdge(headers: Record<string, string> = {}): Record<string, string> {
  return { 'x-edge-auth': testEdgeSecret, ...headers };
}

/** The headers the edge sets for a staff member `staff-<role>` of `tenant` with that one role. */
export function staffViaEdge(
  role: string,
  tenant: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return viaEdge({
    'x-request-id': randomUUID(),
    'x-tenant-id': tenant,
    'x-principal-id': `staff-${role}`,
    'x-roles': role,
    'x-client-ip': '10.0.0.1',
    ...extra,
  });
}
