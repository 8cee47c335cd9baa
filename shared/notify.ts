/**
 * LISTEN/NOTIFY channels by which core (and the tables' triggers, migrations 0200, 0300, 0301, 1101)
 * tell every edge and core process that cached state changed, with the payload each carries.
 * Payloads are hints for dropping cache entries; a process that missed one re-reads everything
 * when its listener reconnects, and caches expire on their own bound regardless.
 */
export const channels = {
  /** payload: JSON `{tenantId, sessionId}`, or empty (drop all sessions). */
  sessions: 'sessions_changed',
  /** payload: the tenant id. */
  tenants: 'tenants_changed',
  /** payload: JSON `{subjectNs, subjectId}`, or empty (drop all). */
  tuples: 'tuples_changed',
  /** payload: ignored (drop all service tokens). */
  serviceTokens: 'service_tokens_changed',
  /** payload: the SCIM credential id (issue 14 item 1: a revoked credential is refused at once). */
  scimCredentials: 'scim_credentials_changed',
  /** payload: the API key id. */
  apiKeys: 'api_keys_changed',
  /** payload: JSON `{tenantId, deviceId}` of a customer device key added or revoked, or empty. */
  devices: 'devices_changed',
  /** payload: the tenant id, or empty (drop all key sets). */
  keys: 'keys_changed',
  /** payload: JSON `{tenantId, userId}` of a staff member provisioned, changed or deprovisioned. */
  staff: 'staff_changed',
  /** payload: JSON `{tenantId, customerId}` of a customer consent granted or withdrawn (migration 0860). */
  consents: 'consents_changed',
  /** payload: the OAuth client id registered, rotated or revoked (migration 0840). */
  oauthClients: 'oauth_clients_changed',
  /** payload: JSON `{tenantId, grantJti, idempotencyKey, expiresAtMs}` of a request-bound step-up used up (migration 0870). */
  stepUpUsed: 'stepup_used',
  /** payload: empty (every core reloads its snapshot of admin_currencies; migration 1101). */
  currencies: 'currencies_changed',
} as const;

/** One field of a JSON payload, or undefined when the payload is not JSON or lacks it. */
export function payloadField(payload: string, field: string): string | undefined {
  try {
    const v = (JSON.parse(payload) as Record<string, unknown>)[field];
    return typeof v === 'string' ? v : undefined;
  } catch {
    return undefined;
  }
}
