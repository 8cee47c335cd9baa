/**
 * The edge shared secret of test-built cores (issue 23 item 4). Core requires one and reads
 * identity headers (x-tenant-id, x-roles, x-client-ip, …) only from requests carrying it in
 * `x-edge-auth`, as the edge sets it; tests that stand in for the edge send it the same way.
 */
import { randomBytes } from 'node:crypto';

export const testEdgeSecret = randomBytes(32).toString('base64url');

/** What every test-built core is given: the secret as production configures it. */
export const testEdgeSecrets: readonly string[] = [testEdgeSecret];

/** `headers` as the edge would forward them: with the shared secret in `x-edge-auth`. */
export function viaEdge(headers: Record<string, string> = {}): Record<string, string> {
  return { 'x-edge-auth': testEdgeSecret, ...headers };
}
