/**
 * The conventions every administration route shares (SPEC 4.6, 5.5, 7.3, 9.5), implemented once:
 * Problem+JSON errors, required X-Request-Id, roles checked again in core (the edge checked
 * them first), per-source and per-tenant rate limits on mutations (429 + Retry-After),
 * Idempotency-Key on creating POSTs and PUT upserts (core/idempotency's one frame: replay →
 * first response, other body → 409), a content ETag on every GET (If-None-Match → 304), If-Match
 * helpers for PATCH (missing → 428, stale → 412), and an audit record in the transaction of
 * every mutation.
 */
import { createHash } from 'node:crypto';
import type { Static, TSchema } from '@sinclair/typebox';
import { canonicalJson } from '../../shared/canonical-json.ts';
import { appendAudit } from '../../shared/audit.ts';
import type { Db, TxClient } from '../../shared/db/pool.ts';
import { AppError, type ErrorFormat } from '../../shared/errors.ts';
import { requirePlatformAdminTenant } from '../platform/operator.ts';
import {
  defineRoute,
  type Method,
  type Reply,
  type RequestContext,
  type ResponseSpec,
  type RouteSpec,
} from '../http/route.ts';
import {
  principalOf,
  scopeOf,
  toReply,
  withIdempotency,
  type IdemScope,
  type WriteResult,
} from '../idempotency/idempotency.ts';
import type { KeyStore } from '../keys/keys.ts';
import { ProblemSchema } from './schemas.ts';
import type { Cursors } from '../http/cursor.ts';
import type { RateLimiter } from './rate-limit.ts';
import type { TargetGuard } from './webhooks/target.ts';
import { noneMatch } from '../http/conditional.ts';

export interface AdminDeps {
  db: Db;
  keys: KeyStore;
  now: () => number;
  limiter: RateLimiter;
  /** Signed, list-bound cursors for every list route (core/http/cursor.ts). */
  pages: Cursors;
  /** SSRF guard for webhook URLs (create/PATCH and :test). */
  webhookTargets: TargetGuard;
}

export interface Caller {
  tenantId: string;
  /** `staff:<id>` for a person (issue 14 item 6), `service-token:<uuid>` for a machine. */
  principalId: string;
  roles: string[];
  ip: string;
  /** How the caller authenticated: a person's AAL (1 or 2); machines are 1. */
  aal: number;
  /** The staff member's session, when a person is calling. */
  sessionId: string | undefined;
}

export interface WriteCtx {
  /** The mutation's transaction: its change and its audit record commit together. */
  q: TxClient;
  caller: Caller;
  /** Append the mutation's audit record in this transaction (SPEC 6.3: every mutation). */
  audit(action: string, target: { type: string; id: string }, attrs?: Record<string, unknown>): Promise<void>;
  /**
   * Append one record of `action` per target, in one chained append in this transaction: a
   * mutation touching thousands of targets (a group-mapping change) audits each in one statement.
   */
  auditEach(action: string, records: readonly AuditedTarget[]): Promise<void>;
  /** Run `fn` once this mutation has committed (e.g. drop a process-local cache); never on rollback. */
  afterCommit(fn: () => void): void;
}

/** One target of a mutation's audit records and what the record says of it. */
export interface AuditedTarget {
  target: { type: string; id: string };
  attrs?: Record<string, unknown> | undefined;
}

/** 'read': GET; 'write': a mutation (Idempotency-Key honoured when sent); 'create': key required. */
export type Mode = 'read' | 'write' | 'create';

interface Base<P extends TSchema, Q extends TSchema, B extends TSchema> {
  method: Method;
  path: string;
  operationId: string;
  summary: string;
  tags: string[];
  /** From the route's declaration (`...declared(method, path)`; shared/routes/admin.ts): checked again here. */
  roles: readonly string[];
  /** From the route's declaration too: Problem+JSON for administration (shared/routes/admin.ts). */
  errorFormat?: ErrorFormat;
  params?: P;
  query?: Q;
  body?: B;
  /** true: If-Match required (428 without, 412 when stale); 'optional': honoured when sent (412). */
  ifMatch?: boolean | 'optional';
  /**
   * A write's 200 answers the whole resource (a PUT of it): the answer carries that body's ETag,
   * a replay too (a stored answer keeps none of the handler's headers), so a client whose first
   * answer was lost learns the version it made from the retry.
   */
  answersRepresentation?: boolean;
  responses: Record<number, ResponseSpec>;
}
type Ctx<P extends TSchema, Q extends TSchema, B extends TSchema> = RequestContext<
  Static<P>,
  Static<Q>,
  Static<B>
>;
export type AdminRouteSpec<P extends TSchema, Q extends TSchema, B extends TSchema> =
  | (Base<P, Q, B> & { mode: 'read'; read: (ctx: Ctx<P, Q, B>, caller: Caller) => Promise<Reply> })
  | (Base<P, Q, B> & {
      mode: 'write' | 'create';
      write: (ctx: Ctx<P, Q, B>, w: WriteCtx) => Promise<WriteResult>;
    });

export function callerOf(ctx: RequestContext<unknown, unknown, unknown>, roles: readonly string[]): Caller {
  const id = ctx.identity;
  if (!id.tenantId)
    throw new AppError('UNAUTHORIZED', 'a staff credential (service token or staff JWT) is required');
  if (!id.roles.some((r) => roles.includes(r))) {
    throw new AppError('FORBIDDEN', `this route needs one of the roles ${roles.join(', ')}`);
  }
  return {
    tenantId: id.tenantId,
    principalId: id.principalId ?? 'unknown',
    roles: id.roles,
    ip: id.clientIp ?? ctx.req.socket.remoteAddress ?? 'unknown',
    aal: id.aal ?? 1,
    sessionId: id.sessionId,
  };
}

/** Issue 14 item 6: every audit record of a staff action names the person's AAL and session. */
export function actorAttrs(caller: Caller): Record<string, unknown> {
  return { aal: caller.aal, ...(caller.sessionId ? { sessionId: caller.sessionId } : {}) };
}

/** Strong ETag over the canonical JSON of a representation. */
export function etagOf(body: unknown): string {
  return `"${createHash('sha256')
    .update(canonicalJson(body ?? null))
    .digest('base64url')
    .slice(0, 27)}"`;
}

/**
 * SPEC 9.5: If-Match is required (428) and must name the current representation (412). The
 * comparison is strong (RFC 9110 13.1.1): a weak tag (W/"…") never matches, as every ETag here
 * is strong and a weak one only promises an equivalent representation, not this one.
 */
export function checkIfMatch(headers: Readonly<Record<string, string>>, current: unknown): void {
  const given = headers['if-match'];
  if (!given)
    throw new AppError('PRECONDITION_REQUIRED', 'If-Match with the ETag of a GET is required on this update');
  const want = etagOf(current);
  const tags = given.split(',').map((t) => t.trim());
  if (!tags.includes(want) && !tags.includes('*'))
    throw new AppError('PRECONDITION_FAILED', 'the resource changed since it was read: GET it again');
}

const requestIdHeader = {
  name: 'X-Request-Id',
  required: true,
  description: 'Required on every administration call (SPEC 4.6)',
};
// Documented as required where the handler requires them (issue 15 item 4: the document must not
// accept what the API refuses); the handler refuses their absence after the role check, with its own code.
const idemHeader = (required: boolean) => ({
  name: 'Idempotency-Key',
  required,
  handlerChecks: true,
  description: required
    ? 'Required (400 IDEMPOTENCY_KEY_REQUIRED without): 8–128 characters [A-Za-z0-9._:-]; a replay returns the first response'
    : 'Optional: replays the first response',
});
const ifMatchHeader = (required: boolean) => ({
  name: 'If-Match',
  required,
  handlerChecks: required,
  description: required
    ? 'Required: the ETag of the resource (428 without, 412 when stale)'
    : 'Optional: the ETag of a GET; when it names a representation no longer current, 412 and nothing changes',
});

const problems = (codes: number[]): Record<number, ResponseSpec> =>
  Object.fromEntries(
    codes.map((c) => [
      c,
      { description: 'Problem+JSON', schema: ProblemSchema, contentType: 'application/problem+json' },
    ]),
  );

const notModified: Record<number, ResponseSpec> = {
  304: { description: 'Not Modified: If-None-Match names the current ETag' },
};

/**
 * What a write's Idempotency-Key is bound to besides method and path: the body, and the query
 * when there is one (`DELETE /v1/idempotency/{key}?principal=` names the record it purges), so
 * one key sent with another query is 409 IDEMPOTENCY_CONFLICT, never the first answer replayed
 * for a request that did nothing. The same holds for the If-Match of a route that honours one:
 * a write refused 412 and sent again, same key, with the version read since is another request
 * (409), not the first one's 412 replayed to a client that did as told. Without a query or an
 * If-Match it is the body alone, as records already stored were hashed.
 */
function hashedRequest(ctx: RequestContext<unknown, unknown, unknown>, versioned: boolean): unknown {
  const query = typeof ctx.query === 'object' && ctx.query !== null ? ctx.query : {};
  const ifMatch = versioned ? ctx.headers['if-match'] : undefined;
  if (Object.keys(query).length === 0 && !ifMatch) return ctx.body;
  return {
    body: ctx.body ?? null,
    ...(Object.keys(query).length > 0 ? { query } : {}),
    ...(ifMatch ? { ifMatch } : {}),
  };
}

/**
 * An administration mutation: one transaction with its audit record, through core's one
 * idempotent write frame (core/idempotency) when an Idempotency-Key applies, refusals stored and
 * replayed as Problem+JSON. Steps registered with `afterCommit` run once the mutation committed.
 */
async function runWrite(
  deps: AdminDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  caller: Caller,
  mode: 'write' | 'create',
  versioned: boolean,
  fn: (w: WriteCtx) => Promise<WriteResult>,
): Promise<Reply> {
  // The key is the caller's (tenant and staff principal), never the tenant's alone (issue 13 item 3).
  const owner = { tenantId: caller.tenantId, principal: principalOf('staff', ctx.identity.principalId) };
  const keyed = mode === 'create' || ctx.headers['idempotency-key'] !== undefined;
  const scope: IdemScope | undefined = keyed ? scopeOf(ctx, owner, hashedRequest(ctx, versioned)) : undefined;
  let committed: (() => void)[] = [];
  const makeCtx = (q: TxClient): WriteCtx => ({
    q,
    caller,
    audit: (action, target, attrs) => auditWrite(deps, ctx, caller, q, action, [{ target, attrs }]),
    auditEach: (action, records) => auditWrite(deps, ctx, caller, q, action, records),
    afterCommit: (fn) => {
      committed.push(fn);
    },
  });
  // A retried transaction starts over; a refused one (its effects rolled back) runs nothing.
  const attempt = async (q: TxClient) => {
    committed = [];
    try {
      return await fn(makeCtx(q));
    } catch (err) {
      committed = [];
      throw err;
    }
  };
  const reply = scope
    ? toReply(await withIdempotency(deps, scope, attempt, 'problem'))
    : await deps.db.tx(async (q) => {
        const out = await attempt(q);
        return { status: out.status, body: out.body, headers: out.headers ?? {} };
      });
  for (const step of committed) {
    try {
      step();
    } catch (err) {
      // The mutation is committed: its answer must say so, whatever a cache drop did.
      ctx.log.error({ err: (err as Error).message }, 'after-commit step failed');
    }
  }
  return reply;
}

async function auditWrite(
  deps: AdminDeps,
  ctx: RequestContext<unknown, unknown, unknown>,
  caller: Caller,
  q: TxClient,
  action: string,
  records: readonly AuditedTarget[],
): Promise<void> {
  if (records.length === 0) return;
  const ts = new Date(deps.now());
  const common = { requestId: ctx.requestId, ip: caller.ip, roles: caller.roles, ...actorAttrs(caller) };
  await appendAudit(
    q,
    records.map((r) => ({
      tenantId: caller.tenantId,
      actor: { type: 'staff', id: caller.principalId },
      action,
      target: r.target,
      attrs: { ...common, ...r.attrs },
      ts,
    })),
  );
}

/** One administration route with the shared conventions around its handler. */
export function adminRoute<P extends TSchema, Q extends TSchema, B extends TSchema>(
  deps: AdminDeps,
  spec: AdminRouteSpec<P, Q, B>,
): RouteSpec {
  const headers: { name: string; required: boolean; description: string; handlerChecks?: boolean }[] = [
    requestIdHeader,
  ];
  if (spec.mode !== 'read') headers.push(idemHeader(spec.mode === 'create'));
  if (spec.ifMatch) headers.push(ifMatchHeader(spec.ifMatch === true));
  const errorCodes = [
    400,
    401,
    403,
    ...(spec.mode === 'read' ? [] : [409, 429]),
    ...(spec.ifMatch ? [412] : []),
    ...(spec.ifMatch === true ? [428] : []),
  ];
  return defineRoute<P, Q, B>({
    method: spec.method,
    path: spec.path,
    operationId: spec.operationId,
    summary: spec.summary,
    tags: spec.tags,
    roles: spec.roles,
    ...(spec.params ? { params: spec.params } : {}),
    ...(spec.query ? { query: spec.query } : {}),
    ...(spec.body ? { body: spec.body } : {}),
    headers,
    ...(spec.errorFormat ? { errorFormat: spec.errorFormat } : {}),
    // SPEC 9.5: every GET carries an ETag, and If-None-Match naming it answers 304 without a body.
    responses: { ...problems(errorCodes), ...(spec.mode === 'read' ? notModified : {}), ...spec.responses },
    handler: async (ctx) => {
      const caller = callerOf(ctx, spec.roles);
      if (spec.mode === 'read') {
        const reply = await spec.read(ctx, caller);
        if (reply.status !== 200 || reply.body === undefined) return reply;
        const etag = etagOf(reply.body);
        // RFC 9110 15.4.5: a 304 carries the Cache-Control (and ETag) the 200 would have, or a
        // cache revalidating a reference table would keep its entry with what it last stored.
        if (noneMatch(ctx.headers['if-none-match'], etag))
          return { status: 304, headers: { ...reply.headers, etag } };
        return { ...reply, headers: { ...reply.headers, etag } };
      }
      await deps.limiter.take(caller, deps.now());
      const reply = await runWrite(deps, ctx, caller, spec.mode, Boolean(spec.ifMatch), (w) =>
        spec.write(ctx, w),
      );
      return spec.answersRepresentation ? withRepresentationEtag(reply) : reply;
    },
  });
}

/** A 200 whose body is the resource's representation, with that body's ETag (a replay had none). */
function withRepresentationEtag(reply: Reply): Reply {
  if (reply.status !== 200 || reply.headers?.etag !== undefined) return reply;
  const body: unknown = reply.raw ? JSON.parse(reply.raw.data.toString()) : reply.body;
  return { ...reply, headers: { ...reply.headers, etag: etagOf(body) } };
}

/**
 * Platform-wide tables (countries, currencies and their mappings and configuration): every tenant
 * depends on them and the currency table is the ledger's source of minor units (issue 21 item 2),
 * so one tenant's Admin changing them would change every other tenant's; only platform
 * administrators (the operator tenant's Admins) write them, as they alone create tenants.
 */
export function platformTable(w: WriteCtx, what: string): Promise<void> {
  return requirePlatformAdminTenant(w.q, w.caller.tenantId, `change ${what}`);
}
