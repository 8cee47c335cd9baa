/**
 * Signed requests from machine clients (SPEC 5.4; canonical form in shared/api-key-signing.ts).
 * Checked in this order, each failure with its own code: headers present (401
 * missing_signature_headers), key known and not revoked (403 invalid_key), not expired (403
 * key_expired), x-api-key-secret when sent (403 bad_secret), date inside the replay window (401
 * stale_date), signature (401 bad_signature; constant-time); then, the request proven to come
 * from the key's holder, the nonce, once per key across every edge (401 nonce_reused), source
 * address in the key's allowlist (403 ip_not_allowed) and the tenant's mutual-TLS rule for
 * machine clients (403 mtls_required; shared/mtls.ts). The nonce comes after the signature, so
 * nobody without the secret can burn a client's nonces, and before where the request came from,
 * so a signed request refused for that is used up: its sender was told it was refused, and the
 * same bytes sent again from inside the allowlist or over a certificate must not then go through
 * (a transfer the client gave up on, made minutes later). SPEC 5.4 names the codes but fixes no
 * order: the allowlist and the tenant's setting come after the signature so that a caller holding
 * only a key id learns neither. Refusals after the signature are audited in the key's tenant,
 * naming the key.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { canonicalString } from '../../shared/api-key-signing.ts';
import { addressAllowed } from '../../shared/ip-ranges.ts';
import type { RequestView } from '../check.ts';
import type { ApiKeyState, EdgeState, TenantState } from '../state/store.ts';
import { CredentialError } from './bearer.ts';
import { asVerified, requireMachineMtls } from './machine-mtls.ts';

/** SPEC 8: request nonce replay window, 5 to 10 minutes. */
export const defaultReplayWindowMs = 5 * 60_000;
export const minReplayWindowMs = 5 * 60_000;
export const maxReplayWindowMs = 10 * 60_000;

const imfFixdate =
  /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const noncePattern = /^[A-Za-z0-9_-]{16,128}$/;

export interface ApiKeyPrincipal {
  kind: 'service';
  via: 'api-key';
  tenantId: string;
  subjectId: string;
  roles: string[];
  scopes: string[];
  key: ApiKeyState;
}

function equal(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

export async function verifyApiKey(
  view: RequestView,
  state: EdgeState,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
  nowMs: number,
  replayWindowMs = defaultReplayWindowMs,
): Promise<ApiKeyPrincipal> {
  const h = view.headers;
  const keyId = h['x-api-key-id'] ?? '';
  const missing = ['x-api-key-id', 'x-signature', 'x-nonce', 'date'].filter((name) => !h[name]);
  if (missing.length > 0)
    throw new CredentialError(401, 'missing_signature_headers', `missing header(s): ${missing.join(', ')}`);
  const key = /^pk_(live|test)_[A-Za-z0-9]{16,64}$/.test(keyId) ? await state.apiKey(keyId) : undefined;
  if (!key || key.revoked) throw new CredentialError(403, 'invalid_key', 'unknown or revoked API key');
  if (key.expiresAtMs !== null && key.expiresAtMs <= nowMs)
    throw new CredentialError(403, 'key_expired', 'API key has expired');
  const secrets = [key.secret];
  const hashes = [key.secretHash];
  if (key.previous && key.previous.validUntilMs > nowMs) {
    secrets.push(key.previous.secret);
    hashes.push(key.previous.secretHash);
  }
  const givenSecret = h['x-api-key-secret'];
  if (givenSecret !== undefined) {
    const hash = createHash('sha256').update(givenSecret).digest();
    if (!hashes.some((x) => equal(x, hash)))
      throw new CredentialError(403, 'bad_secret', 'API key secret does not match');
  }
  const date = h.date ?? '';
  const at = imfFixdate.test(date) ? Date.parse(date) : Number.NaN;
  const window = Math.min(Math.max(replayWindowMs, minReplayWindowMs), maxReplayWindowMs);
  if (!(Math.abs(nowMs - at) <= window))
    throw new CredentialError(
      401,
      'stale_date',
      'date header is missing, malformed or outside the replay window',
    );
  const nonce = h['x-nonce'] ?? '';
  if (!noncePattern.test(nonce))
    throw new CredentialError(401, 'bad_signature', 'x-nonce must be 16–128 characters of [A-Za-z0-9_-]');
  const canonical = canonicalString(view.method, view.pathWithQuery, view.body, date, nonce);
  const given = Buffer.from(h['x-signature'] ?? '', 'utf8');
  const ok = secrets.some((s) =>
    equal(Buffer.from(createHmac('sha256', s).update(canonical, 'utf8').digest('base64url'), 'utf8'), given),
  );
  if (!ok) throw new CredentialError(401, 'bad_signature', 'signature does not match the request');
  await asVerified(key.tenantId, key.id, async () => {
    // Used up once the signature held, whatever is refused below (see the order above).
    if (!(await state.firstUse('nonce', `${key.id}:${nonce}`, 2 * window)))
      throw new CredentialError(401, 'nonce_reused', 'nonce already used');
    // Read as the policy and core read ranges (shared/ip-ranges.ts): an IPv4 caller is not inside ::/0.
    if (!addressAllowed(key.ipAllowlist, view.sourceIp))
      throw new CredentialError(403, 'ip_not_allowed', 'source address is not in the key allowlist');
    await requireMachineMtls(view, tenantOf, key.tenantId, nowMs);
  });
  return {
    kind: 'service',
    via: 'api-key',
    tenantId: key.tenantId,
    subjectId: key.id,
    roles: [],
    scopes: key.scopes,
    key,
  };
}
