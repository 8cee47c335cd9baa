/**
 * The edge decision: authenticate the caller, build the policy input (SPEC 2.6) from the
 * request and cached state, evaluate the current policy revision, audit the decision, and turn
 * it into headers for core or a deny body. Every failure along the way denies.
 */
import type { Logger } from 'pino';
import { isJsonContentType } from '../shared/http/media-type.ts';
import { issueChallenge, origOf, type ChallengeKeys } from '../shared/challenge.ts';
import { isCanonicalPath } from '../shared/canonical-path.ts';
import type { AuditWriter } from './audit-writer.ts';
import type { ShadowFeed } from './shadow.ts';
import { CredentialError } from './auth/bearer.ts';
import { authenticate, type Principal } from './auth/principal.ts';
import { staffRolesIn, type StaffPrincipal } from './auth/staff.ts';
import { consumeBudget } from './auth/budget.ts';
import { publicOriginOf } from './auth/dpop.ts';
import { formatBudgetCount, type BudgetCount } from '../shared/api-key-budget.ts';
import type { CredentialGuard, RateLimiter } from './auth/rate-limit.ts';
import type { RiskEngine } from './auth/risk.ts';
import { bodyOf, maxCheckBodyBytes, type Decision, type RequestView } from './check.ts';
import type { PolicyStore } from '../policy/runtime/store.ts';
import { policyInputJson, type PolicyInputJson } from '../policy/runtime/bundle.ts';
import type { ResolvedRoute } from './routes.ts';
import { FailClosedError } from './metrics.ts';
import type { Deadline, FailClosed } from './server.ts';
import { tenantIdPattern } from '../shared/tenant-id.ts';
import { clientCertificateHeader } from '../shared/mtls.ts';
import type { EdgeState, TenantState, TupleState } from './state/store.ts';
import { localHour } from '../shared/local-hour.ts';
import { storable } from '../shared/audit.ts';

// Tests and tools import it from here; it lives in shared/ because core evaluates caveats too.
export { localHour };

export interface DeciderDeps {
  state: EdgeState;
  /** Signs step-up challenges (SPEC 4.3 rule 2); core verifies them with the same key. */
  challenges: ChallengeKeys;
  policies: PolicyStore;
  audit: AuditWriter;
  /** Issue 22 item 3: tenants' shadow candidates, evaluated off this thread after the answer. */
  shadow?: ShadowFeed;
  risk: RiskEngine;
  /** Limits unauthenticated routes per source address; omitted means unlimited. */
  limiter?: RateLimiter;
  /** Counts wrong SCIM credentials and service tokens per source address; omitted means uncounted. */
  credentialGuard?: CredentialGuard;
  log: Logger;
  /** Shared secret proving to core that identity headers come from the edge. */
  edgeSecret: string;
  /** SPEC 8: nonce/date replay window for signed requests (5–10 minutes). */
  replayWindowMs?: number;
  now?: () => number;
}

/**
 * Stands for a tenant id that is not one (the tenants table's pattern): it matches no tenant, so
 * the request is judged as naming an unknown tenant, and no malformed text (a NUL or a lone
 * surrogate from a JSON body) travels on into lookups, the policy input or the audit.
 */
export const malformedTenant = '!malformed';

const checkedTenant = (t: string): string => (tenantIdPattern.test(t) ? t : malformedTenant);

/**
 * The tenant a request targets explicitly: path parameter, query (`tenantId`, `tenant`) or JSON
 * body field (`tenantId`, `tenant_id`). Core reads whichever its route takes; when a request
 * names more than one tenant, the edge cannot know which, so it is judged as naming a malformed
 * one (refused), never by the place the edge happened to look first.
 */
export function targetTenantOf(view: RequestView, resolved: ResolvedRoute): string | undefined {
  const named = new Set<string>();
  const fromPath = resolved.params.tenantId ?? resolved.params.tenant_id;
  if (fromPath) named.add(fromPath);
  // The query as core reads it (core/http/server.ts, validate.ts parseQuery): URL's `search`,
  // everything after the first `?` up to a `#` (Node hands core a target with a `#` as it came),
  // less that `?`, then read by URLSearchParams, which drops one more leading `?` (`??tenant=t`
  // names `t` to core).
  const query = view.pathWithQuery.indexOf('?');
  if (query >= 0) {
    const fragment = view.pathWithQuery.indexOf('#', query);
    const q = new URLSearchParams(view.pathWithQuery.slice(query + 1, fragment < 0 ? undefined : fragment));
    for (const k of ['tenantId', 'tenant']) for (const v of q.getAll(k)) named.add(v);
  }
  // A malformed body (no `json`) is core's to refuse with 400; it names no tenant.
  const json =
    view.body.length > 0 && isJsonContentType(view.headers['content-type']) ? bodyOf(view).json : undefined;
  const body = json?.value;
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    for (const k of ['tenantId', 'tenant_id']) {
      const t = (body as Record<string, unknown>)[k];
      if (typeof t === 'string') named.add(t);
      else if (t !== undefined && t !== null) named.add(malformedTenant);
    }
  }
  if (named.size === 0) return undefined;
  if (named.size > 1) return malformedTenant;
  return checkedTenant([...named][0] as string);
}

/**
 * The tenant's security settings as the policy sees them: every SPEC 2.10 field but
 * `mtls_trusted_cas`, whose PEM certificates (up to 20 of 16 KiB) no policy reads (machine mTLS is
 * edge/auth/machine-mtls.ts's) and which would otherwise be serialised into every evaluation and
 * every recorded decision input. One copy per cached settings object (dropped with it on
 * `tenants_changed`), so a Check allocates none.
 */
const policySecurityOf = new WeakMap<object, Record<string, unknown>>();
function policySecurity(security: TenantState['security']): Record<string, unknown> {
  // The row's jsonb is not checked on the way in: a scalar there goes to the policy as it always
  // did (`in` would throw on it, failing every Check of the tenant).
  const stored: unknown = security;
  if (typeof stored !== 'object' || stored === null || !('mtls_trusted_cas' in security)) return security;
  let seen = policySecurityOf.get(security);
  if (!seen) {
    const { mtls_trusted_cas: _left, ...rest } = security;
    seen = rest;
    policySecurityOf.set(security, seen);
  }
  return seen;
}

/** The policy input's `tenant`: id, status, the settings the policy may read, tuples, platform. */
export function tenantInput(
  id: string,
  t: TenantState | undefined,
  tuples: TupleState[] = [],
): Record<string, unknown> {
  if (!id) return { id: '' };
  if (!t) return { id, status: 'UNKNOWN', security: {} };
  return { id, status: t.status, security: policySecurity(t.security), tuples, platform: t.platform };
}

/** Actions that start a new money intent: velocity (risk) counts them. */
const newMoneyIntents = new Set(['transfer.create']);

/** SPEC 4.3 rule 2 `orig` of the request as Envoy sent it (`:path` keeps the query string). */
export const origOfView = (view: RequestView): string =>
  (view.orig ??= origOf(view.method, view.pathWithQuery, bodyOf(view)));

/**
 * Does the customer's token carry a step-up made for this very request and not yet used up?
 * Which actions need one is the policy's call (registry `request_bound_actions`, authz.rego);
 * the host only says whether the binding holds. A grant used by a committed action
 * (core/identity/bound.ts) no longer binds, except for a retry carrying the Idempotency-Key of
 * the request that used it: core answers that with the stored response (issue 13 item 2).
 */
async function boundToThisRequest(
  p: Extract<Principal, { kind: 'customer' }>,
  state: EdgeState,
  view: RequestView,
): Promise<boolean> {
  if (p.aal < 2 || p.orig === undefined || p.orig !== origOfView(view)) return false;
  const usedWith = await state.stepUpUse(p.tenantId, p.jti);
  if (usedWith === undefined) return true;
  return usedWith !== '' && view.headers['idempotency-key'] === usedWith;
}

/** A machine credential or a staff member belongs to one tenant: a member of it by construction. */
const memberOf = (tenantId: string) => ({
  relation: 'member',
  object_ns: 'tenant',
  object_id: tenantId,
  caveat: {},
});

async function subjectInput(
  p: Principal,
  state: EdgeState,
  view: RequestView,
  resourceTenant: string,
): Promise<Record<string, unknown> | undefined> {
  if (p.kind === 'anonymous') return undefined;
  if (p.kind === 'staff') {
    // Issue 14 item 5: a person (type user, staff: true); roles are those the token grants in the
    // tenant the request acts on (org_roles at home, tenant_roles in an owned tenant).
    return {
      id: p.subjectId,
      type: 'user',
      staff: true,
      roles: staffRolesIn(p, resourceTenant),
      aal: p.aal,
      amr: p.amr,
      tuples: [memberOf(p.tenantId)],
      stepup_bound: p.aal >= 2 && p.orig !== undefined,
    };
  }
  if (p.kind === 'customer') {
    return {
      id: p.subjectId,
      type: 'customer',
      roles: [],
      aal: p.aal,
      amr: p.amr,
      tuples: await state.tuplesOf('customer', p.subjectId, p.tenantId),
      consents: await state.consentsOf(p.tenantId, p.subjectId),
      // Request-bound actions and high risk are satisfied only by this (SPEC 4.3 rules 2–3).
      stepup_bound: await boundToThisRequest(p, state, view),
    };
  }
  if (p.kind === 'user') {
    return {
      id: p.subjectId,
      type: 'user',
      roles: p.roles,
      aal: p.aal,
      amr: p.amr,
      tuples: await state.tuplesOf('user', p.subjectId, p.tenantId),
      // Agents never hold a request-bound step-up; a high-risk agent request is refused.
      stepup_bound: false,
    };
  }
  return {
    id: p.subjectId,
    type: 'service',
    roles: p.roles,
    scopes: p.scopes,
    aal: 1,
    tuples: [memberOf(p.tenantId)],
  };
}

/** The transfer routes whose body may name whose wallet pays (`payerCustomerId`). */
const payerActions = new Set(['transfer.create', 'transfer.confirm']);
/** Stands for a `payerCustomerId` that is not a non-empty string: no tuple names it, so it is refused. */
const malformedPayer = '!malformed';

/**
 * Facts about the resource the policy needs: whether a session being revoked is the caller's
 * own (a logout, no step-up) or another one (a bound step-up; issue 13 item 1); whose wallet a
 * transfer pays from when not the caller's (`payer_for`, issue 20 item 3).
 */
function resourceAttrs(p: Principal, resolved: ResolvedRoute, view: RequestView): Record<string, unknown> {
  if (p.kind === 'customer' && resolved.action === 'session.revoke')
    return { current_session: resolved.params.id === p.session.id };
  if (p.kind === 'staff' && resolved.action === 'session.admin_revoke')
    return { current_session: resolved.params.id === p.session.id };
  // Issue 20 item 3 (SPEC 2.7 `payer`): a transfer from another customer's wallet names that
  // customer; the policy's delegated_payer check then needs a live payer tuple (core checks again).
  if (payerActions.has(resolved.action)) {
    const payer = jsonField(view, 'payerCustomerId');
    if (payer === undefined || payer === null) return {};
    // A lone surrogate (a JSON escape in the body) is no id, and the policy's JSON parser refuses
    // the input that carries one: handed on, it failed the Check closed (503) instead of refusing.
    const id = typeof payer === 'string' && payer !== '' && storable(payer) === payer;
    return { payer_for: id ? payer : malformedPayer };
  }
  // Issue 16 item 2: rotating a webhook's secret needs AAL 2; pausing or resuming does not.
  if (resolved.action === 'webhook.update_webhook')
    return { rotates_secret: jsonField(view, 'rotateSecret') === true };
  return {};
}

/** Bearer credentials looked up by hash (SCIM credentials, service tokens): what an address could guess. */
function guessableCredential(view: RequestView, credential: string | undefined): boolean {
  if (view.headers['x-api-key-id'] !== undefined) return false;
  return credential === 'scim' || credential === 'staff' || credential === 'service';
}

function jsonField(view: RequestView, field: string): unknown {
  if (!isJsonContentType(view.headers['content-type'])) return undefined;
  // The body parsed once per Check (issue 18 item 1), shared with the other readers.
  const body = bodyOf(view).json?.value;
  return body && typeof body === 'object' && !Array.isArray(body)
    ? (body as Record<string, unknown>)[field]
    : undefined;
}

/**
 * Issue 14 item 5: a staff token carrying `orig` (issued by a step-up for one request) is good
 * for that request only, and once (recorded in stepup_uses; a retry with the Idempotency-Key of
 * the request that used it passes, core answers it from the stored response).
 */
async function staffGrantRefusal(
  p: StaffPrincipal,
  state: EdgeState,
  view: RequestView,
  action: string,
): Promise<Decision | undefined> {
  if (p.orig === undefined) return undefined;
  const refuse = (message: string): Decision => ({
    allow: false,
    status: 401,
    code: 'invalid_token',
    message,
    extraBody: { reason: 'invalid_token' },
    responseHeaders: {
      'www-authenticate': `Bearer realm="payments", error="invalid_token", error_description="${message}"`,
    },
  });
  if (p.orig !== origOfView(view)) return refuse('this step-up token was issued for another request');
  const first = await state.useStaffStepUp({
    tenantId: p.tenantId,
    jti: p.jti,
    sessionId: p.session.id,
    userId: p.userId,
    orig: p.orig,
    action,
    idempotencyKey: view.headers['idempotency-key'],
    expS: p.expS,
  });
  return first ? undefined : refuse('this step-up token was already used');
}

type PolicyResult = ReturnType<NonNullable<PolicyStore['current']>['decide']>;
type Assessed = ReturnType<RiskEngine['assess']>;

export function createDecider(deps: DeciderDeps) {
  const now = deps.now ?? Date.now;
  const tenantOf = (id: string) => deps.state.tenant(id);
  return async (view: RequestView, resolved: ResolvedRoute, deadline?: Deadline): Promise<Decision> => {
    if (deps.audit.overloaded())
      throw new FailClosedError('audit_overloaded', 'decision audit is behind; refusing to decide');
    const policy = deps.policies.current;
    if (!policy) throw new FailClosedError('no_policy', 'no policy bundle loaded');
    const nowMs = now();
    const admitted = await admit(deps, deadline, view, resolved, nowMs, tenantOf);
    if ('refused' in admitted) return admitted.refused;
    const { principal } = admitted;
    const target = targetTenantOf(view, resolved);
    const requestTenant = principal.kind === 'anonymous' ? (target ?? '') : principal.tenantId;
    const resourceTenant = target ?? requestTenant;
    if (principal.kind === 'staff' && principal.orig !== undefined && principal.orig !== origOfView(view)) {
      const refused = (await staffGrantRefusal(principal, deps.state, view, resolved.action)) as Decision;
      audit(deps, deadline, view, resolved, principal, requestTenant, refused, undefined);
      return refused;
    }
    const tenant = requestTenant ? await deps.state.tenant(requestTenant) : undefined;
    const { input, assessed } = await policyInput(deps, view, resolved, principal, {
      requestTenant,
      resourceTenant,
      tenant,
      nowMs,
    });
    // The untraced entry point: the trace is formatted only for a denial's audit, below. The
    // input is serialised once: that text is evaluated and recorded for replay.
    const inputJson = policyInputJson(input);
    const result = policy.decideJson(inputJson.evaluated);
    const masking = JSON.stringify((result.obligations as { masking?: unknown }).masking ?? {});
    /** What every audit of this decision carries (a refusal below, or the answer). */
    const facts = { result, risk: assessed, masking, input: inputJson };
    let budget: { amount: string; counted: boolean } | undefined;
    let budgetTaken: BudgetCount | undefined;
    if (result.allow && principal.kind === 'service' && principal.via === 'api-key') {
      const b = await apiKeyBudget(deps, deadline, view, resolved, principal, nowMs);
      if ('refused' in b) {
        audit(deps, deadline, view, resolved, principal, requestTenant, b.refused, facts);
        return b.refused;
      }
      ({ budget, budgetTaken } = b);
    }
    if (result.allow && principal.kind === 'staff') {
      const used = await staffGrantRefusal(principal, deps.state, view, resolved.action);
      if (used) {
        audit(deps, deadline, view, resolved, principal, requestTenant, used, facts);
        return used;
      }
    }
    const decision: Decision = result.allow
      ? {
          allow: true,
          status: 200,
          set: allowHeaders(
            deps,
            view,
            resolved,
            principal,
            { requestTenant, resourceTenant, result, masking, assessed },
            budgetTaken,
          ),
        }
      : await policyRefusal(deps, view, principal, result, nowMs);
    // A request naming no existing tenant is chained under _platform (the audit function's
    // default), not under a chain of whatever name the body carried.
    auditAnswer(deps, deadline, view, resolved, principal, tenant ? requestTenant : '', decision, {
      extra: { ...facts, budget },
      policy,
    });
    return decision;
  };
}

/** Before the policy: the request's shape, the address limits and the credential; each refusal audited. */
async function admit(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
  nowMs: number,
  tenantOf: (id: string) => Promise<TenantState | undefined>,
): Promise<{ principal: Principal } | { refused: Decision }> {
  // No closures here: tsx (keepNames) names each one it creates, a property definition per
  // closure per Check that a CPU profile showed at about 2 µs each (issue 18 item 1).
  const route = resolved.route;
  const malformed = requestShapeRefusal(view, resolved);
  if (malformed) return refusedIn(deps, deadline, view, resolved, malformed);
  const throttled = await publicRouteRefusal(deps, deadline, view, resolved);
  if (throttled) return { refused: throttled };
  // Issue 14 item 5: an address that presented too many wrong guessable credentials waits.
  const guarded =
    deps.credentialGuard && guessableCredential(view, route?.credential) ? deps.credentialGuard : undefined;
  const waitS = guarded?.retryAfterS(view.sourceIp) ?? 0;
  if (waitS > 0)
    return refusedIn(deps, deadline, view, resolved, {
      allow: false,
      status: 429,
      code: 'RATE_LIMITED',
      message: 'too many wrong credentials from this address',
      responseHeaders: { 'retry-after': String(waitS) },
    });
  try {
    return {
      principal: await authenticate(
        resolved.route?.credential,
        view,
        deps.state,
        tenantOf,
        nowMs,
        deps.replayWindowMs,
      ),
    };
  } catch (err) {
    if (!(err instanceof CredentialError)) throw err;
    if (guarded && err.code === 'invalid_token') guarded.failed(view.sourceIp);
    return refusedIn(deps, deadline, view, resolved, credentialRefusal(err, view), err.verifiedAs);
  }
}

/** A refusal before the policy, audited under the tenant the refused credential verifiably named. */
function refusedIn(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
  d: Decision,
  who?: CredentialError['verifiedAs'],
): { refused: Decision } {
  audit(deps, deadline, view, resolved, undefined, who?.tenantId ?? '', d, undefined, who?.actor);
  return { refused: d };
}

/** The bundle that decided: a denial's audit evaluates its traced entry point on the same input. */
type DecidingPolicy = NonNullable<PolicyStore['current']>;

/** The decision's audit: an answer at once, a denial with its failed checks once the answer has gone. */
function auditAnswer(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
  principal: Principal,
  tenantId: string,
  decision: Decision,
  a: { extra: AuditExtra; policy: DecidingPolicy },
): void {
  if (decision.allow) audit(deps, deadline, view, resolved, principal, tenantId, decision, a.extra);
  else auditDenial(deps, deadline, view, resolved, principal, tenantId, decision, a.extra, a.policy);
}

/** A request the edge refuses by its shape alone, before any credential is read (unaudited here). */
function requestShapeRefusal(view: RequestView, resolved: ResolvedRoute): Decision | undefined {
  // Envoy normalises paths (envoy.yaml); a path that is not canonical here would be read
  // differently by core's URL parser than by the route table, so it is refused outright.
  if (!isCanonicalPath(view.path)) {
    return {
      allow: false,
      status: 400,
      code: 'MALFORMED_REQUEST',
      message: 'request path is not canonical (backslash, dot segment, empty segment or fragment)',
    };
  }
  // Envoy buffers at most 8192 bytes and answers 413 itself past that (deploy/envoy/envoy.yaml);
  // a bigger or partial body here means a misconfigured proxy, and a decision on part of a
  // body (tenant, request-bound step-up, signed requests) would be a decision on the wrong request.
  if (view.body.length > maxCheckBodyBytes || view.headers['x-envoy-auth-partial-body'] === 'true') {
    return {
      allow: false,
      status: 413,
      code: 'PAYLOAD_TOO_LARGE',
      message: `request body exceeds ${maxCheckBodyBytes} bytes`,
    };
  }
  // RFC 7644 clients (and scim2-tester) expect 404 for an unknown SCIM path and 405 for a
  // method the path does not serve, in SCIM's error format; nothing there is decided by policy.
  if (!resolved.route && resolved.errorFormat === 'scim') {
    const allowed = resolved.allowed ?? [];
    return allowed.length > 0
      ? {
          allow: false,
          status: 405,
          code: 'METHOD_NOT_ALLOWED',
          message: `${view.method} is not allowed on ${view.path}`,
          responseHeaders: { allow: allowed.join(', ') },
        }
      : { allow: false, status: 404, code: 'NOT_FOUND', message: `no SCIM resource at ${view.path}` };
  }
  return undefined;
}

/** The per-address limit of unauthenticated routes: a refusal, audited under the named tenant if it exists. */
async function publicRouteRefusal(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
): Promise<Decision | undefined> {
  const route = resolved.route;
  if (!(deps.limiter && route?.credential === 'public' && route.resource !== 'platform')) return undefined;
  const retryS = deps.limiter.take(`${view.sourceIp}|${route.method} ${route.template}`);
  if (retryS <= 0) return undefined;
  const limited: Decision = {
    allow: false,
    status: 429,
    code: 'RATE_LIMITED',
    message: 'too many requests',
    responseHeaders: { 'retry-after': String(retryS) },
  };
  const named = targetTenantOf(view, resolved);
  audit(
    deps,
    deadline,
    view,
    resolved,
    undefined,
    named !== undefined && (await deps.state.tenant(named)) ? named : '',
    limited,
    undefined,
  );
  return limited;
}

/** A credential that did not authenticate, answered with its own status and code. */
function credentialRefusal(err: CredentialError, view: RequestView): Decision {
  const signed = view.headers['x-api-key-id'] !== undefined;
  return {
    allow: false,
    status: err.status,
    code: err.code,
    message: err.message,
    responseHeaders:
      err.status === 401 ? { 'www-authenticate': err.wwwAuthenticate(signed ? 'Signature' : 'Bearer') } : {},
    extraBody: { reason: err.code },
  };
}

/** The policy input (SPEC 2.6) of an authenticated request, and the risk assessed for it. */
async function policyInput(
  deps: DeciderDeps,
  view: RequestView,
  resolved: ResolvedRoute,
  principal: Principal,
  at: { requestTenant: string; resourceTenant: string; tenant: TenantState | undefined; nowMs: number },
): Promise<{ input: Record<string, unknown>; assessed: Assessed }> {
  const { requestTenant, resourceTenant, tenant, nowMs } = at;
  // A staff session records its sign-in method where others record a device id: no device to match.
  const session =
    principal.kind === 'customer' || principal.kind === 'user'
      ? principal.session
      : principal.kind === 'staff'
        ? { ...principal.session, device: null }
        : undefined;
  const deviceId = view.headers['x-device-id'];
  const assessed = deps.risk.assess({
    session,
    deviceId,
    ip: view.sourceIp,
    subject: principal.kind === 'anonymous' ? undefined : principal.subjectId,
    // Velocity counts new money intents (a create), not confirmations of ones already stepped up.
    moneyMoving: newMoneyIntents.has(resolved.action),
  });
  const input = {
    // The request tenant's own relations (owner of tenants it created) matter only when the
    // request names another tenant; they are read then, never on same-tenant requests.
    tenant: tenantInput(
      requestTenant,
      tenant,
      requestTenant && resourceTenant !== requestTenant
        ? await deps.state.tuplesOf('tenant', requestTenant)
        : [],
    ),
    subject: await subjectInput(principal, deps.state, view, resourceTenant),
    resource: {
      type: resolved.resource,
      id: resolved.params.id ?? '',
      tenant_id: resourceTenant,
      attrs: resourceAttrs(principal, resolved, view),
    },
    action: resolved.action,
    purpose: resolved.purpose,
    context: {
      ip: view.sourceIp,
      ua: view.headers['user-agent'] ?? '',
      risk: assessed.risk,
      time: new Date(nowMs).toISOString(),
      now_ns: nowMs * 1e6,
      local_hour: localHour(nowMs, tenant?.security.timezone),
    },
  };
  return { input, assessed };
}

/** An allowed API-key request's money counted against the key's budget, or the refusal (unaudited). */
async function apiKeyBudget(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
  principal: Extract<Principal, { via: 'api-key' }>,
  nowMs: number,
): Promise<
  | { refused: Decision }
  | { budget: { amount: string; counted: boolean }; budgetTaken: BudgetCount | undefined }
> {
  const money = resolved.route?.money;
  // Customer and agent money is never an API key's to move (checked again in core).
  if (money === 'no-api-keys') {
    return {
      refused: {
        allow: false,
        status: 403,
        code: 'POLICY_DENIED',
        message: 'API keys cannot move money on this route',
      },
    };
  }
  // Past the deadline the answer is already a deny: the consumption rolls back with it.
  const b = await consumeBudget(
    (fn) =>
      deps.state.tx(async (q) => {
        const r = await fn(q);
        if (deadline?.expired)
          throw new Error('decision budget passed before the API-key budget was committed');
        return r;
      }),
    principal.key,
    money,
    bodyOf(view),
    nowMs,
  );
  if (!b.ok) {
    const refused: Decision =
      b.retryAfterS > 0
        ? {
            allow: false,
            status: 429,
            code: 'BUDGET_EXCEEDED',
            message: `API key budget exceeded (${b.reason})`,
            responseHeaders: { 'retry-after': String(b.retryAfterS) },
          }
        : {
            allow: false,
            status: 403,
            code: 'POLICY_DENIED',
            message: `API key budget cannot count this request (${b.reason})`,
          };
    return { refused };
  }
  return { budget: { amount: b.amountMicros.toString(), counted: b.counted }, budgetTaken: b.taken };
}

/** The headers an allowed request carries to core: purpose, masking, the principal and its session. */
function allowHeaders(
  deps: DeciderDeps,
  view: RequestView,
  resolved: ResolvedRoute,
  principal: Principal,
  d: {
    requestTenant: string;
    resourceTenant: string;
    result: PolicyResult;
    masking: string;
    assessed: Assessed;
  },
  budgetTaken: BudgetCount | undefined,
): Record<string, string> {
  const { requestTenant, resourceTenant, result, masking, assessed } = d;
  const set: Record<string, string> = {
    'x-purpose': resolved.purpose,
    'x-masking': masking,
    'x-edge-auth': deps.edgeSecret,
    'x-policy-version': result.policy_version,
    'x-registry-version': result.registry_version,
    // Issue 20 item 5: core's audit records name the request's risk as the edge assessed it.
    'x-risk': assessed.risk,
  };
  if (requestTenant) set['x-tenant-id'] = requestTenant;
  // Core checks DPoP proofs at sign-in and the token endpoint against the URL the client
  // used, and binds client tokens to the certificate Envoy verified (issue 17 items 2–3).
  set['x-public-origin'] = publicOriginOf(view);
  if (view.peerCertificate) set[clientCertificateHeader] = view.peerCertificate;
  // Before sign-in the device id is the client's own claim (recorded on the session at login).
  const claimedDevice = view.headers['x-device-id'];
  if (principal.kind === 'anonymous' && claimedDevice && /^[A-Za-z0-9._:-]{1,128}$/.test(claimedDevice))
    set['x-device-id'] = claimedDevice;
  if (principal.kind !== 'anonymous') set['x-principal-id'] = principal.subjectId;
  if (principal.kind === 'user') {
    set['x-session-id'] = principal.session.id;
    set['x-aal'] = String(principal.aal);
    set['x-roles'] = principal.roles.join(',');
    if (principal.session.device) set['x-device-id'] = principal.session.device;
  }
  if (principal.kind === 'staff') {
    // Core names the person, their AAL and session in every audit record (issue 14 item 6).
    set['x-session-id'] = principal.session.id;
    set['x-aal'] = String(principal.aal);
    set['x-roles'] = staffRolesIn(principal, resourceTenant).join(',');
    set['x-credential'] = 'staff';
  }
  if (principal.kind === 'customer') {
    set['x-session-id'] = principal.session.id;
    set['x-aal'] = String(principal.aal);
    if (principal.session.device) set['x-device-id'] = principal.session.device;
  }
  if (principal.kind === 'service') {
    set['x-roles'] = principal.roles.join(',');
    set['x-scopes'] = principal.scopes.join(' ');
    // Core counts an API key's movements by id (reversals, captures) against its budget,
    // and gives back what was counted here when nothing moved: it must know the key.
    set['x-credential'] = principal.via;
    if (budgetTaken) set['x-budget-counted'] = formatBudgetCount(budgetTaken);
  }
  return set;
}

/** A policy denial: a step-up challenge bound to this request where the policy asks for one. */
async function policyRefusal(
  deps: DeciderDeps,
  view: RequestView,
  principal: Principal,
  result: PolicyResult,
  nowMs: number,
): Promise<Decision> {
  if (result.step_up && principal.kind === 'staff') {
    // Issue 16 item 2: a challenge bound to this request; /auth/mfa/complete turns it into an
    // AAL 2 token carrying `orig`, good for this request once (staffGrantRefusal).
    const challenge = await issueChallenge(
      deps.challenges,
      { tenantId: principal.tenantId, sub: principal.userId, orig: origOfView(view), methods: ['passkey'] },
      nowMs,
    );
    return {
      allow: false,
      status: 403,
      code: 'MFA_REQUIRED',
      message: result.message,
      extraBody: { challenge, methods: ['passkey'] },
    };
  }
  if (result.step_up && principal.kind === 'customer') {
    const methods: ('otp' | 'device')[] = ['otp', 'device'];
    const challenge = await issueChallenge(
      deps.challenges,
      { tenantId: principal.tenantId, sub: principal.subjectId, orig: origOfView(view), methods },
      nowMs,
    );
    return {
      allow: false,
      status: 403,
      code: 'MFA_REQUIRED',
      message: result.message,
      extraBody: { challenge, methods },
    };
  }
  return {
    allow: false,
    status: result.status === 401 ? 401 : 403,
    code: 'POLICY_DENIED',
    message: result.message,
  };
}

interface AuditExtra {
  result: { allow: boolean; policy_version: string; registry_version: string };
  /**
   * The policy input as evaluated (a denial's trace evaluates the same text) and as recorded for
   * replay when the writer records inputs (issue 22 item 1).
   */
  input?: PolicyInputJson;
  risk: { risk: string; signals: string[] };
  masking: string;
  budget?: { amount: string; counted: boolean };
  /** A denial's failed checks with their details, from the traced entry point. */
  failedChecks?: unknown[];
}

/**
 * A policy denial is audited with the checks that failed and why (the traced entry point, as
 * simulate shows them), evaluated once the answer has gone: the trace costs the WASM several
 * times the verdict, and the denial's caller need not wait for it (issue 18 item 1). A trace
 * that cannot be made does not cost the record: it is audited without it.
 */
function auditDenial(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
  principal: Principal,
  tenantId: string,
  d: Decision,
  extra: AuditExtra,
  policy: DecidingPolicy,
): void {
  setImmediate(() => {
    let failedChecks: unknown[] | undefined;
    try {
      failedChecks = extra.input
        ? policy.evaluateJson(extra.input.evaluated).reasons.filter((r) => !r.ok)
        : undefined;
    } catch (err) {
      deps.log.warn(
        { reqId: view.requestId, err: (err as Error).message },
        'denial audited without its policy trace',
      );
    }
    audit(
      deps,
      deadline,
      view,
      resolved,
      principal,
      tenantId,
      d,
      failedChecks ? { ...extra, failedChecks } : extra,
    );
  });
}

/** How recorded inputs name a request no route matched (its path is caller text). */
const unmatchedRoute = '(no route)';

function audit(
  deps: DeciderDeps,
  deadline: Deadline | undefined,
  view: RequestView,
  resolved: ResolvedRoute,
  principal: Principal | undefined,
  tenantId: string,
  d: Decision,
  extra: AuditExtra | undefined,
  /** The actor a refused credential verifiably named, when there is no principal (admit). */
  named?: { type: string; id: string },
): void {
  // Past the budget the answer was already a fail-closed deny, audited by failClosedAuditor.
  if (deadline?.expired) return;
  const actor =
    !principal || principal.kind === 'anonymous'
      ? (named ?? { type: 'anonymous', id: view.sourceIp })
      : { type: principal.kind, id: principal.subjectId };
  const principalTenant = principal && principal.kind !== 'anonymous' ? principal.tenantId : '';
  // Requests naming no tenant (platform probes) are chained under `_platform`.
  const chain = tenantId || principalTenant || '_platform';
  // Issue 22 item 1: replay and shadow rows name the route, never an unmatched raw path (personal data).
  const routeLabel = `${view.method} ${resolved.route?.template ?? unmatchedRoute}`;
  if (extra?.input !== undefined && deps.shadow?.wants(chain)) {
    deps.shadow.offer({
      t: chain,
      inputJson: extra.input.recorded,
      allow: extra.result.allow,
      d: view.decisionId,
      p: resolved.purpose,
      r: routeLabel,
    });
  }
  deps.audit.push(
    {
      tenantId: chain,
      actor,
      action: 'authz.decision',
      target: { type: resolved.resource, id: resolved.route?.template ?? view.path },
      decision: {
        allow: d.allow,
        code: d.code ?? 'OK',
        purpose: resolved.purpose,
        policy_version: extra?.result.policy_version ?? deps.policies.current?.policyVersion,
        aal:
          principal?.kind === 'customer' || principal?.kind === 'user' || principal?.kind === 'staff'
            ? principal.aal
            : principal?.kind === 'service'
              ? 1
              : 0,
        trace_id: view.requestId,
        decision_id: view.decisionId,
      },
      attrs: {
        ip: view.sourceIp,
        ua: view.headers['user-agent'] ?? '',
        method: view.method,
        risk: extra?.risk.risk ?? 'low',
        risk_signals: extra?.risk.signals ?? [],
        masking: extra?.masking ?? '{}',
        registry_version: extra?.result.registry_version ?? deps.policies.current?.registryVersion,
        ...(extra?.budget
          ? { budget_consumed_micros: extra.budget.amount, budget_counted: extra.budget.counted }
          : {}),
        ...(extra?.failedChecks ? { failed_checks: extra.failedChecks } : {}),
        // Issue 14 item 6: a staff person's decisions name their session too (AAL is in decision.aal).
        ...(principal?.kind === 'staff' ? { session_id: principal.session.id } : {}),
      },
    },
    extra?.input === undefined
      ? undefined
      : {
          inputJson: extra.input.recorded,
          allow: extra.result.allow,
          policyVersion: extra.result.policy_version,
          route: routeLabel,
        },
  );
}

/**
 * The audit of fail-closed answers (edge/server.ts FailClosed): a deny with code
 * `authz_unavailable` and the reason. Recorded under `_platform` because nothing about the
 * request was verified; the tenant it named is kept in attrs. While the writer is far behind,
 * such records are counted rather than queued without limit (AuditWriter.pushFailClosed).
 */
export function failClosedAuditor(deps: Pick<DeciderDeps, 'audit' | 'policies'>): FailClosed {
  return (view, resolved, reason) => {
    let named: string | undefined;
    if (view && resolved) {
      try {
        named = targetTenantOf(view, resolved);
      } catch {
        named = undefined;
      }
    }
    deps.audit.pushFailClosed({
      tenantId: '_platform',
      actor: { type: 'anonymous', id: view?.sourceIp ?? '' },
      action: 'authz.decision',
      target: { type: resolved?.resource ?? 'unknown', id: resolved?.route?.template ?? view?.path ?? '' },
      decision: {
        allow: false,
        code: 'authz_unavailable',
        purpose: resolved?.purpose ?? 'unknown',
        policy_version: deps.policies.current?.policyVersion ?? 'none',
        aal: 0,
        trace_id: view?.requestId ?? '',
        decision_id: view?.decisionId ?? '',
      },
      attrs: {
        ip: view?.sourceIp ?? '',
        ua: view?.headers['user-agent'] ?? '',
        method: view?.method ?? '',
        reason,
        named_tenant: named ?? '',
        registry_version: deps.policies.current?.registryVersion ?? 'none',
      },
    });
  };
}
