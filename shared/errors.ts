/**
 * The one error type of the core service. Every expected failure is an AppError with a code
 * from the closed list below; the table maps each code to its HTTP status and title, and the
 * two renderers produce the core body `{code, message}` (SPEC 2.2) or Problem+JSON (SPEC 7.3).
 * Nothing branches on message text.
 */

/** code → [HTTP status, title]. Add new codes here, grouped by the domain that raises them. */
const table = {
  // transport and validation (SPEC 7.1)
  VALIDATION_FAILED: [400, 'Bad Request'],
  MALFORMED_JSON: [400, 'Bad Request'],
  MISSING_REQUEST_ID: [400, 'Bad Request'],
  UNAUTHORIZED: [401, 'Unauthorized'],
  FORBIDDEN: [403, 'Forbidden'],
  NOT_FOUND: [404, 'Record Not Found'],
  METHOD_NOT_ALLOWED: [405, 'Method Not Allowed'],
  CONFLICT: [409, 'Conflict'],
  IDEMPOTENCY_CONFLICT: [409, 'Conflict'],
  PAYLOAD_TOO_LARGE: [413, 'Payload Too Large'],
  UNSUPPORTED_MEDIA_TYPE: [415, 'Unsupported Media Type'],
  UNPROCESSABLE: [422, 'Parameter Error'],
  PRECONDITION_FAILED: [412, 'Precondition Failed'],
  PRECONDITION_REQUIRED: [428, 'Precondition Required'],
  RATE_LIMITED: [429, 'Too Many Requests'],
  INTERNAL: [500, 'Server Error'],
  /** A response broke the schema its route declares (only when core checks its responses: tests). */
  RESPONSE_SCHEMA_MISMATCH: [500, 'Server Error'],
  SERVICE_UNAVAILABLE: [503, 'Service Unavailable'],
  // idempotency (core/idempotency; DESIGN.md "Balances")
  IDEMPOTENCY_KEY_REQUIRED: [400, 'Bad Request'],
  IDEMPOTENCY_KEY_INVALID: [400, 'Bad Request'],
  // oauth (SPEC 5.1; RFC 6749 section 5.2 names go in the `error` field)
  INVALID_CLIENT: [401, 'Unauthorized'],
  UNSUPPORTED_GRANT_TYPE: [400, 'Bad Request'],
  INVALID_SCOPE: [400, 'Bad Request'],
  /** An authenticated client its tenant's state refuses a token (suspended, source address). */
  UNAUTHORIZED_CLIENT: [400, 'Bad Request'],
  // proof of possession (issue 17; RFC 9449 §7.1, §8; RFC 7523)
  DPOP_PROOF_INVALID: [401, 'Unauthorized'],
  DPOP_NONCE_REQUIRED: [401, 'Unauthorized'],
  /** A tenant with require_dpop signs in only with a DPoP proof. */
  DPOP_REQUIRED: [401, 'Unauthorized'],
  /** At the token endpoint RFC 9449 answers 400 `invalid_dpop_proof` / `use_dpop_nonce`. */
  OAUTH_DPOP_INVALID: [400, 'Bad Request'],
  OAUTH_DPOP_NONCE: [400, 'Bad Request'],
  OAUTH_INVALID_REQUEST: [400, 'Bad Request'],
  OAUTH_CLIENT_INVALID: [400, 'Bad Request'],
  OAUTH_CLIENT_NOT_FOUND: [404, 'Record Not Found'],
  /** The tenant forbids shared-secret client authentication (security setting). */
  OAUTH_METHOD_FORBIDDEN: [422, 'Parameter Error'],
  INSUFFICIENT_SCOPE: [403, 'Forbidden'],
  // ledger (core/ledger/INVARIANTS.md "Result codes")
  ACCOUNT_NOT_FOUND: [404, 'Record Not Found'],
  POSTING_NOT_FOUND: [404, 'Record Not Found'],
  HOLD_NOT_FOUND: [404, 'Record Not Found'],
  OVERDRAFT_LINE_NOT_FOUND: [404, 'Record Not Found'],
  SAVINGS_PRODUCT_NOT_FOUND: [404, 'Record Not Found'],
  POSTING_ALREADY_REVERSED: [409, 'Conflict'],
  HOLD_NOT_PENDING: [409, 'Conflict'],
  HOLD_EXPIRED: [409, 'Conflict'],
  OVERDRAFT_LINE_EXISTS: [409, 'Conflict'],
  SAVINGS_PRODUCT_EXISTS: [409, 'Conflict'],
  INVALID_AMOUNT: [422, 'Parameter Error'],
  UNKNOWN_CURRENCY: [422, 'Parameter Error'],
  UNKNOWN_PRODUCT: [422, 'Parameter Error'],
  PRODUCT_NOT_ALLOWED: [422, 'Parameter Error'],
  UNKNOWN_TRANSACTION_TYPE: [422, 'Parameter Error'],
  TOO_FEW_ENTRIES: [422, 'Parameter Error'],
  UNBALANCED_POSTING: [422, 'Parameter Error'],
  CURRENCY_MISMATCH: [422, 'Parameter Error'],
  SAME_ACCOUNT: [422, 'Parameter Error'],
  ACCOUNT_CLOSED: [422, 'Parameter Error'],
  ACCOUNT_NOT_EMPTY: [422, 'Parameter Error'],
  INSUFFICIENT_FUNDS: [422, 'Parameter Error'],
  POSTING_NOT_REVERSIBLE: [422, 'Parameter Error'],
  CAPTURE_EXCEEDS_HOLD: [422, 'Parameter Error'],
  OVERDRAFT_IN_USE: [422, 'Parameter Error'],
  INVALID_PERIOD: [422, 'Parameter Error'],
  // customer transfers (issue 7; SPEC 4.3)
  BENEFICIARY_NOT_FOUND: [404, 'Record Not Found'],
  PAYEE_NOT_FOUND: [404, 'Record Not Found'],
  CANNOT_PAY_SELF: [422, 'Parameter Error'],
  LIMITS_UNAVAILABLE: [422, 'Parameter Error'],
  INTENT_SIGNATURE_INVALID: [403, 'Forbidden'],
  /** One intent signature approves one transfer (issue 13 item 2). */
  INTENT_SIGNATURE_REUSED: [409, 'Conflict'],
  TRANSFER_NOT_FOUND: [404, 'Record Not Found'],
  TRANSFER_NOT_PENDING: [409, 'Conflict'],
  TRANSFER_EXPIRED: [422, 'Parameter Error'],
  /** SPEC 2.7 `payer` (issue 20 item 3): no live payer tuple from the caller to the named wallet owner. */
  PAYER_NOT_AUTHORIZED: [403, 'Forbidden'],
  /** A confirm naming another wallet owner than the pending transfer's (or none, for a delegated one). */
  PAYER_MISMATCH: [422, 'Parameter Error'],
  // API keys (SPEC 2.9, 5.4.5, 7.2): budget refusals answer as the edge's do
  API_KEY_NOT_FOUND: [404, 'Record Not Found'],
  BUDGET_EXCEEDED: [429, 'Too Many Requests'],
  POLICY_DENIED: [403, 'Forbidden'],
  // authz simulation (SPEC 4.4)
  POLICY_REF_NOT_FOUND: [404, 'Record Not Found'],
  POLICY_UNAVAILABLE: [503, 'Service Unavailable'],
  // identity (SPEC 4.2, 5.2, 7.2, 8): failed logins share one answer whatever the cause
  INVALID_CREDENTIALS: [401, 'Unauthorized'],
  // bearer access tokens: the one table of shared/access-token.ts, the same codes as the edge's
  UNAUTHENTICATED: [401, 'Unauthorized'],
  invalid_token: [401, 'Unauthorized'],
  session_revoked: [401, 'Unauthorized'],
  session_expired: [401, 'Unauthorized'],
  device_revoked: [401, 'Unauthorized'],
  /** A DPoP-bound access token without its proof: the edge's code, and core's on the routes it checks. */
  invalid_dpop_proof: [401, 'Unauthorized'],
  /** SPEC 2.10 require_mtls_for_m2m: a machine call without its certificate (the edge's code too). */
  mtls_required: [403, 'Forbidden'],
  INVALID_REFRESH_TOKEN: [401, 'Unauthorized'],
  OTP_INVALID: [401, 'Unauthorized'],
  VERIFICATION_INVALID: [401, 'Unauthorized'],
  DEVICE_ASSERTION_INVALID: [401, 'Unauthorized'],
  /** A new device key waits out the tenant's cool-off before it may step up or sign (issue 13 item 1). */
  DEVICE_COOLING_OFF: [403, 'Forbidden'],
  /** After a PIN reset by phone verification, an OTP step-up waits out the same cool-off (issue 13 item 1). */
  PIN_RESET_HOLD: [403, 'Forbidden'],
  DEVICE_NOT_FOUND: [404, 'Record Not Found'],
  PUBLIC_KEY_INVALID: [400, 'Bad Request'],
  VERIFICATION_REQUIRED: [403, 'Forbidden'],
  MFA_REQUIRED: [403, 'Forbidden'],
  challenge_mismatch: [403, 'Forbidden'],
  TENANT_MISMATCH: [403, 'Forbidden'],
  TENANT_NOT_FOUND: [404, 'Record Not Found'],
  LOCKED: [429, 'Too Many Requests'],
  // issue 13 item 4: the sign-in source address is slowed down (carrier-NAT sized), not locked
  ADDRESS_THROTTLED: [429, 'Too Many Requests'],
  // staff passkeys (issue 16): one answer for every unusable enrolment link
  ENROLMENT_INVALID: [401, 'Unauthorized'],
  PASSKEY_NOT_FOUND: [404, 'Record Not Found'],
  STAFF_USER_NOT_FOUND: [404, 'Record Not Found'],
  // admin (SPEC 4.6, 7.3; issue 6): bad input 400, missing 404, state conflicts 409
  CURSOR_INVALID: [400, 'Bad Request'],
  COUNTRY_INVALID: [400, 'Bad Request'],
  CURRENCY_INVALID: [400, 'Bad Request'],
  CONFIG_INVALID: [400, 'Bad Request'],
  SCHEDULE_OVERLAP: [400, 'Bad Request'],
  SCHEDULE_GAP: [400, 'Bad Request'],
  SCHEDULE_PRECISION: [400, 'Bad Request'],
  SCHEDULE_INVALID: [400, 'Bad Request'],
  WEBHOOK_INVALID: [400, 'Bad Request'],
  BASE_CURRENCY_NOT_ALLOWED: [400, 'Bad Request'],
  FLAG_INVALID: [400, 'Bad Request'],
  COUNTRY_NOT_FOUND: [404, 'Record Not Found'],
  CURRENCY_NOT_FOUND: [404, 'Record Not Found'],
  ENVIRONMENT_NOT_FOUND: [404, 'Record Not Found'],
  PRODUCT_NOT_FOUND: [404, 'Record Not Found'],
  CONFIG_NOT_FOUND: [404, 'Record Not Found'],
  SCHEDULE_NOT_FOUND: [404, 'Record Not Found'],
  FLAG_NOT_FOUND: [404, 'Record Not Found'],
  WEBHOOK_NOT_FOUND: [404, 'Record Not Found'],
  OUTBOX_NOT_FOUND: [404, 'Record Not Found'],
  IDEMPOTENCY_NOT_FOUND: [404, 'Record Not Found'],
  AUDIT_NOT_FOUND: [404, 'Record Not Found'],
  COUNTRY_EXISTS: [409, 'Conflict'],
  CURRENCY_EXISTS: [409, 'Conflict'],
  TENANT_EXISTS: [409, 'Conflict'],
  ENVIRONMENT_EXISTS: [409, 'Conflict'],
  PRODUCT_EXISTS: [409, 'Conflict'],
  COUNTRY_IN_USE: [409, 'Conflict'],
  CURRENCY_IN_USE: [409, 'Conflict'],
  /** The minor units of a currency some ledger account holds (issue 21 item 2). */
  CURRENCY_MINOR_UNITS_LOCKED: [409, 'Conflict'],
  SCHEDULE_ACTIVE: [409, 'Conflict'],
  SCHEDULE_NOT_EDITABLE: [409, 'Conflict'],
  CONFIG_STATE_CONFLICT: [409, 'Conflict'],
  PROMOTION_INVALID: [422, 'Parameter Error'],
  NO_ACTIVE_SCHEDULE: [422, 'Parameter Error'],
  NO_FEE_TIER: [422, 'Parameter Error'],
  // agents (SPEC 4.5; issue 9; core/agents/STATES.md)
  TXN_NOT_FOUND: [404, 'Record Not Found'],
  CUSTOMER_NOT_FOUND: [404, 'Record Not Found'],
  KYC_EXISTS: [409, 'Conflict'],
  TXN_NOT_AWAITING: [409, 'Conflict'],
  TXN_EXPIRED: [409, 'Conflict'],
  TXN_NOT_REVERSIBLE: [409, 'Conflict'],
  TXN_ALREADY_REVERSED: [409, 'Conflict'],
  REVERSAL_WINDOW_CLOSED: [409, 'Conflict'],
  DAY_CLOSED: [409, 'Conflict'],
  /** The agent's tier, status or training does not allow this operation (GET /v1/agent/capabilities says why). */
  CAPABILITY_REQUIRED: [403, 'Forbidden'],
  CUSTOMER_CODE_INVALID: [401, 'Unauthorized'],
  KYC_REQUIRED: [422, 'Parameter Error'],
  PHONE_NOT_VERIFIED: [422, 'Parameter Error'],
  WATCHLIST_MATCH: [422, 'Parameter Error'],
  LIMIT_EXCEEDED: [422, 'Parameter Error'],
  // agent float, commissions, wallets, reports (issue 9 items 5-7, 9; core/agents/FLOAT.md)
  FLOAT_INSTRUCTION_NOT_FOUND: [404, 'Record Not Found'],
  FLOAT_INSTRUCTION_STATE: [409, 'Conflict'],
  PAYOUT_NOT_FOUND: [404, 'Record Not Found'],
  PAYOUT_ALREADY_ACCEPTED: [409, 'Conflict'],
  PAYOUT_STALE: [409, 'Conflict'],
  NOTHING_TO_PAY: [422, 'Parameter Error'],
  WALLET_NOT_FOUND: [404, 'Record Not Found'],
  CUSTOMER_CONSENT_REQUIRED: [403, 'Forbidden'],
  DAY_ALREADY_CLOSED: [409, 'Conflict'],
  DAY_NOT_STARTED: [422, 'Parameter Error'],
  // agent training, disputes (issue 9 items 8, 10)
  QUIZ_NOT_FOUND: [404, 'Record Not Found'],
  QUIZ_ALREADY_PASSED: [409, 'Conflict'],
  QUIZ_ATTEMPTS_EXHAUSTED: [409, 'Conflict'],
  DISPUTE_NOT_FOUND: [404, 'Record Not Found'],
  DISPUTE_EXISTS: [409, 'Conflict'],
  DISPUTE_CLOSED: [409, 'Conflict'],
  ATTACHMENT_LIMIT_REACHED: [409, 'Conflict'],
  MULTIPART_INVALID: [400, 'Bad Request'],
  ATTACHMENT_TOO_LARGE: [413, 'Payload Too Large'],
  ATTACHMENT_TYPE_REFUSED: [415, 'Unsupported Media Type'],
  // staff purposes (issue 20 item 4; SPEC 2.5): fraud holds, KYC access, aggregates, consent
  /** The account is under a fraud hold: debits and new holds are refused, credits still arrive. */
  ACCOUNT_FROZEN: [422, 'Parameter Error'],
  FRAUD_HOLD_NOT_FOUND: [404, 'Record Not Found'],
  FRAUD_HOLD_EXISTS: [409, 'Conflict'],
  /** A fraud hold is lifted only by a different fraud officer than the one who placed it. */
  SECOND_OFFICER_REQUIRED: [403, 'Forbidden'],
  /** compliance.kyc: every access states its reason (X-Access-Reason). */
  ACCESS_REASON_REQUIRED: [400, 'Bad Request'],
  /** analytics.aggregate: a group smaller than the minimum group size is never answered. */
  GROUP_TOO_SMALL: [403, 'Forbidden'],
  RAW_ROWS_DENIED: [403, 'Forbidden'],
  CONSENT_NOT_FOUND: [404, 'Record Not Found'],
  // relationship tuples (issue 20 item 3; SPEC 2.7)
  TUPLE_NOT_FOUND: [404, 'Record Not Found'],
  /** A subject or object that is not the tenant's, a relation it cannot hold, or a bad caveat. */
  TUPLE_INVALID: [422, 'Parameter Error'],
  /** owner or admin over a tenant, and parent, are granted by platform admins only. */
  TUPLE_PLATFORM_ONLY: [403, 'Forbidden'],
  // SCIM 2.0 provisioning (issue 14 item 1; RFC 7644 section 3.12 scimType in scimTypes below)
  SCIM_INVALID_FILTER: [400, 'Bad Request'],
  SCIM_INVALID_SYNTAX: [400, 'Bad Request'],
  SCIM_INVALID_VALUE: [400, 'Bad Request'],
  SCIM_INVALID_PATH: [400, 'Bad Request'],
  SCIM_NO_TARGET: [400, 'Bad Request'],
  SCIM_MUTABILITY: [400, 'Bad Request'],
  SCIM_TOO_MANY: [400, 'Bad Request'],
  SCIM_UNIQUENESS: [409, 'Conflict'],
  SCIM_NOT_FOUND: [404, 'Record Not Found'],
  // staff sessions and federated sign-in (issue 14 items 1, 2, 4)
  SESSION_NOT_FOUND: [404, 'Record Not Found'],
  IDP_NOT_CONFIGURED: [404, 'Record Not Found'],
  IDP_INVALID: [422, 'Parameter Error'],
  IDP_UNREACHABLE: [502, 'Bad Gateway'],
  FEDERATION_FAILED: [401, 'Unauthorized'],
  STAFF_NOT_PROVISIONED: [403, 'Forbidden'],
  // tenant onboarding (issue 20 item 1): first admin, agents and outlets, security, templates
  STAFF_USER_EXISTS: [409, 'Conflict'],
  AGENT_EXISTS: [409, 'Conflict'],
  OUTLET_NOT_FOUND: [404, 'Record Not Found'],
  AGENT_NOT_FOUND: [404, 'Record Not Found'],
  SECURITY_INVALID: [422, 'Parameter Error'],
  TEMPLATE_NOT_FOUND: [404, 'Record Not Found'],
  TEMPLATE_EXISTS: [409, 'Conflict'],
  /** A template naming a product or currency the copying tenant does not have. */
  TEMPLATE_NOT_APPLICABLE: [422, 'Parameter Error'],
  // data placement (issue 20 item 2; SPEC 2.10 resident_regions; core/residency)
  /** A tenant's resident_regions (new or changed) exclude this database cluster's region (SQLSTATE RS001). */
  RESIDENCY_REGION_MISMATCH: [422, 'Parameter Error'],
  /** This core's database is in a region the tenant's data may not live in: refused, fail closed. */
  TENANT_NOT_RESIDENT: [421, 'Misdirected Request'],
  // policy impact (issue 22): candidate bundles and replay jobs
  /** A candidate bundle that does not verify against the trusted keys (or is not a bundle). */
  BUNDLE_INVALID: [422, 'Parameter Error'],
  CANDIDATE_NOT_FOUND: [404, 'Record Not Found'],
  /** A tenant stores at most 20 candidates: deleting one frees a slot. */
  CANDIDATE_LIMIT: [409, 'Conflict'],
  /** A candidate is the tenant's shadow or has an impact job queued or running: it cannot be deleted. */
  CANDIDATE_IN_USE: [409, 'Conflict'],
  IMPACT_JOB_NOT_FOUND: [404, 'Record Not Found'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof table;

/** Extra fields a few errors carry on the wire (e.g. a step-up challenge). */
export type ErrorExtra = Record<string, unknown>;

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly title: string;
  readonly extra: ErrorExtra | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(
    code: ErrorCode,
    message?: string,
    opts?: { extra?: ErrorExtra; headers?: Record<string, string> },
  ) {
    const [status, title] = table[code];
    super(message ?? title);
    this.name = 'AppError';
    this.code = code;
    this.status = status;
    this.title = title;
    this.extra = opts?.extra;
    this.headers = opts?.headers;
  }
}

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(table, value);
}

/**
 * One refusal as either renderer needs it: core's AppError is one, and so is a deny the edge or
 * the dev gateway answers itself (their codes are not all in the table above: `title` then comes
 * from the status, see titleOf).
 */
export interface Refusal {
  readonly code: string;
  readonly status: number;
  readonly title: string;
  readonly message: string;
  readonly extra?: ErrorExtra | undefined;
}

/**
 * Which error body a route answers with: core `{code, message}`, Problem+JSON (administration)
 * or a SCIM error (RFC 7644 section 3.12, the `/scim/v2` routes).
 */
export type ErrorFormat = 'core' | 'problem' | 'scim';

/** The generic title of each status: the first code listed for it (VALIDATION_FAILED, UNAUTHORIZED, ...). */
const statusTitles = new Map<number, string>();
for (const [status, title] of Object.values(table))
  if (!statusTitles.has(status)) statusTitles.set(status, title);

/** The table's title for a known code; otherwise the generic title of the status. */
export function titleOf(code: string, status: number): string {
  return isErrorCode(code) ? table[code][1] : (statusTitles.get(status) ?? 'Error');
}

/** Core wire body (SPEC 2.2). */
export function toCoreBody(err: Refusal): Record<string, unknown> {
  return { code: err.code, message: err.message, ...err.extra };
}

/**
 * Problem+JSON body (RFC 9457, SPEC 7.3) for the administration API, whether core, the edge or
 * the dev gateway refuses: `code` stays as an extension member so clients can branch on it.
 */
export function toProblem(err: Refusal, instance: string): Record<string, unknown> {
  return {
    type: `urn:problem:${err.code.toLowerCase().replaceAll('_', '-')}`,
    title: err.title,
    status: err.status,
    detail: err.message,
    instance,
    code: err.code,
    ...err.extra,
  };
}

/**
 * PostgreSQL data exceptions (class 22) that only a request's values cause: text that is no
 * number, uuid or date, a value out of range, a character the database cannot hold. Validation
 * refuses these first (core/http/validate.ts); one that slips through is still the caller's bad
 * input, answered 400, never 500, and logged with its SQLSTATE as a validation gap (server.ts).
 */
const inputDataExceptions = new Set(['22001', '22003', '22007', '22008', '22009', '22021', '22P02', '22P05']);

export function isInputDataException(err: unknown): boolean {
  const sqlstate = (err as { code?: unknown } | null)?.code;
  return typeof sqlstate === 'string' && inputDataExceptions.has(sqlstate);
}

export const problemContentType = 'application/problem+json';
export const scimContentType = 'application/scim+json';

/** RFC 7644 section 3.12 `scimType` of each code that has one (the others carry status and detail only). */
const scimTypes: Partial<Record<string, string>> = {
  SCIM_INVALID_FILTER: 'invalidFilter',
  SCIM_INVALID_SYNTAX: 'invalidSyntax',
  SCIM_INVALID_VALUE: 'invalidValue',
  SCIM_INVALID_PATH: 'invalidPath',
  SCIM_NO_TARGET: 'noTarget',
  SCIM_MUTABILITY: 'mutability',
  SCIM_TOO_MANY: 'tooMany',
  SCIM_UNIQUENESS: 'uniqueness',
  MALFORMED_JSON: 'invalidSyntax',
  VALIDATION_FAILED: 'invalidValue',
};

/** SCIM error body (RFC 7644 section 3.12): status is a string there; `scimType` where one applies. */
export function toScimError(err: Refusal): Record<string, unknown> {
  const scimType = scimTypes[err.code];
  return {
    schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'],
    status: String(err.status),
    ...(scimType ? { scimType } : {}),
    detail: err.message,
  };
}

/** A refusal rendered for its audience: the body text and its content type. */
export function renderRefusal(
  err: Refusal,
  format: ErrorFormat,
  instance: string,
): { contentType: string; body: string } {
  if (format === 'problem')
    return { contentType: problemContentType, body: JSON.stringify(toProblem(err, instance)) };
  if (format === 'scim') return { contentType: scimContentType, body: JSON.stringify(toScimError(err)) };
  return { contentType: 'application/json', body: JSON.stringify(toCoreBody(err)) };
}

// --- Issue 18 item 4: database connections exhausted (wip/perf2) ---
/**
 * pg-pool's refusal when no connection frees up within `connectionTimeoutMillis`
 * (shared/db/pool.ts), and pg's own when a new connection is not established in time: the
 * database is saturated, not broken. The caller is told to come back (503 with Retry-After),
 * never given a 500 (issue 18 item 4: past capacity, a fast refusal the client can act on).
 */
export function isPoolExhausted(err: unknown): boolean {
  if (!(err instanceof Error) || 'code' in err) return false;
  return (
    err.message === 'timeout exceeded when trying to connect' ||
    err.message === 'Connection terminated due to connection timeout'
  );
}

export const databaseBusy = (): AppError =>
  new AppError('SERVICE_UNAVAILABLE', 'the service is busy; retry shortly', {
    headers: { 'retry-after': '1' },
  });
// --- end issue 18 item 4 ---

/**
 * SQLSTATEs of migration 1104 (a configured amount finer than its currency's minor units, or in
 * a currency the table lacks) and the refusal each is: their messages name the field, the amount
 * and the currency only.
 */
const currencyGuardCodes: Partial<Record<string, 'INVALID_AMOUNT' | 'UNKNOWN_CURRENCY'>> = {
  CU001: 'INVALID_AMOUNT',
  CU002: 'UNKNOWN_CURRENCY',
};

/** Any thrown value becomes an AppError; unknown failures become INTERNAL without detail. */
export function asAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (isPoolExhausted(err)) return databaseBusy();
  if (isInputDataException(err))
    return new AppError('VALIDATION_FAILED', 'a value in the request is out of range or cannot be stored');
  // Issue 20 item 2: migration 0900's guard under every writer of a tenant's resident_regions.
  if ((err as { code?: unknown } | null)?.code === 'RS001')
    return new AppError('RESIDENCY_REGION_MISMATCH', (err as Error).message);
  // Migration 1104's guards under every writer of an amount configured in a currency.
  const guard = currencyGuardCodes[String((err as { code?: unknown } | null)?.code)];
  if (guard) return new AppError(guard, (err as Error).message);
  return new AppError('INTERNAL', 'internal error');
}
