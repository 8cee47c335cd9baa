/**
 * The core HTTP pipeline, one implementation for every route: request id, routing (404/405),
 * body limit and decoding (413/415/400), schema validation, the handler, the error body in the
 * route's format, a JSON log line and the request-duration histogram. A client mistake never
 * becomes a 500, and no response ever carries a stack trace.
 */
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { TemplateTable, familyFormats } from '../../shared/path-template.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { decodeBody, defaultBodyLimitBytes, readBody } from './body.ts';
import {
  AppError,
  asAppError,
  isInputDataException,
  scimContentType,
  toCoreBody,
  toProblem,
  toScimError,
} from '../../shared/errors.ts';
import type { EdgeIdentity, ErrorFormat, Method, Reply, RouteSpec } from './route.ts';
import { parseQuery, storable, validate } from './validate.ts';
import { isCanonicalPath } from '../../shared/canonical-path.ts';
import { inMoneyScope, moneyScopeOf, type MoneyScope } from './money.ts';
import { responseProblems } from './response-check.ts';
import { withRequestAudit } from '../../shared/audit.ts';
import { auditFactsOf } from './audit-facts.ts';

/**
 * A required header the request lacks. A missing Authorization is the one token verifier's
 * refusal (shared/access-token.ts: 401 UNAUTHENTICATED, as at the edge), not a bad request.
 */
function missingHeader(name: string): AppError {
  const lower = name.toLowerCase();
  if (lower === 'authorization') return new AppError('UNAUTHENTICATED', 'a bearer access token is required');
  return new AppError(
    lower === 'x-request-id' ? 'MISSING_REQUEST_ID' : 'VALIDATION_FAILED',
    `header ${name} is required`,
  );
}

export interface HttpDeps {
  routes: RouteSpec[];
  log: Logger;
  metrics: Metrics;
  /**
   * Identity headers are read only from requests carrying one of these in x-edge-auth (issue 23
   * item 4: the current EDGE_SHARED_SECRET first, then the previous one while it rotates). At
   * least one is required: there is no "no secret, so trust" mode.
   */
  edgeSecrets: readonly string[];
  /** Give an API key back what the edge counted for a request that moved nothing (core/apikeys/budget.ts). */
  releaseBudget?: (scope: MoneyScope) => Promise<void>;
  /**
   * Issue 15 item 4, tests only: every response is checked against the schema its route declares
   * for the status; a mismatch (or an undeclared status) is answered 500 RESPONSE_SCHEMA_MISMATCH
   * and logged naming route, status and the first errors, so the test that met it fails.
   */
  checkResponses?: boolean;
  /**
   * Issue 20 item 2: refuse (421 TENANT_NOT_RESIDENT) a request naming a tenant whose data may not
   * live where this core's database is (core/residency/gate.ts). Runs after validation, before the handler.
   */
  residency?: (
    tenantIds: string[],
    asker: { principalId: string | undefined; method: string; route: string; requestId: string },
  ) => Promise<void>;
}

/**
 * Every tenant a request names: the one the edge vouched for, and a `tenantId` in the path, query
 * or body (platform staff acting on a tenant they own; sign-in routes, whose handlers read the body's).
 */
function tenantsNamed(identity: EdgeIdentity, ...parts: unknown[]): string[] {
  const out = identity.tenantId ? [identity.tenantId] : [];
  for (const part of parts) {
    const t = part && typeof part === 'object' ? (part as { tenantId?: unknown }).tenantId : undefined;
    if (typeof t === 'string' && t !== '') out.push(t);
  }
  return out;
}

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;
const methodsWithBody = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Accept the caller's X-Request-Id when it is well-formed, otherwise mint one. */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'] ?? req.headers['x-req-id'];
  const value = Array.isArray(given) ? given[0] : given;
  return value && requestIdPattern.test(value) ? value : randomUUID();
}

function flatHeaders(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

const noIdentity: EdgeIdentity = {
  tenantId: undefined,
  principalId: undefined,
  sessionId: undefined,
  purpose: undefined,
  aal: undefined,
  clientIp: undefined,
  deviceId: undefined,
  roles: [],
  scopes: [],
  credential: undefined,
  budgetCounted: undefined,
  publicOrigin: undefined,
  clientCertificate: undefined,
  fromEdge: false,
};

/** Digests compared in constant time, so neither the content nor the length of a secret leaks. */
const digest = (v: string): Buffer => createHash('sha256').update(v).digest();

function edgeChecker(secrets: readonly string[]): (h: Record<string, string>) => boolean {
  if (
    !Array.isArray(secrets) ||
    secrets.length === 0 ||
    secrets.some((s) => typeof s !== 'string' || s.length === 0)
  )
    throw new Error(
      'core needs the edge shared secret (EDGE_SHARED_SECRET): identity headers are never trusted without it',
    );
  const wanted = secrets.map(digest);
  return (h) => {
    const given = h['x-edge-auth'];
    if (given === undefined || given === '') return false;
    const d = digest(given);
    // Every candidate is compared, so timing does not say which secret matched.
    return wanted.reduce((ok, w) => timingSafeEqual(d, w) || ok, false);
  };
}

function identityOf(
  h: Record<string, string>,
  fromEdge: (h: Record<string, string>) => boolean,
): EdgeIdentity {
  if (!fromEdge(h)) return noIdentity;
  const aal = h['x-aal'] !== undefined ? Number(h['x-aal']) : undefined;
  return {
    tenantId: h['x-tenant-id'],
    principalId: h['x-principal-id'],
    sessionId: h['x-session-id'],
    purpose: h['x-purpose'],
    aal: aal !== undefined && Number.isInteger(aal) ? aal : undefined,
    clientIp: h['x-client-ip'],
    deviceId: h['x-device-id'],
    roles: (h['x-roles'] ?? '')
      .split(',')
      .map((r) => r.trim().toLowerCase())
      .filter(Boolean),
    scopes: (h['x-scopes'] ?? '').split(' ').filter(Boolean),
    credential: h['x-credential'],
    budgetCounted: h['x-budget-counted'],
    publicOrigin: h['x-public-origin'],
    clientCertificate: h['x-client-certificate'],
    fromEdge: true,
  };
}

function send(res: ServerResponse, reply: Reply, requestId: string, method: string): void {
  res.setHeader('x-request-id', requestId);
  for (const [k, v] of Object.entries(reply.headers ?? {})) res.setHeader(k, v);
  let payload: string | Buffer | undefined;
  if (reply.raw) {
    res.setHeader('content-type', reply.raw.contentType);
    payload = reply.raw.data;
  } else if (reply.body !== undefined) {
    if (!res.hasHeader('content-type')) res.setHeader('content-type', 'application/json; charset=utf-8');
    payload = JSON.stringify(reply.body);
  }
  res.statusCode = reply.status;
  if (payload !== undefined) res.setHeader('content-length', Buffer.byteLength(payload));
  res.end(method === 'HEAD' ? undefined : payload);
}

function errorReply(err: AppError, format: ErrorFormat, instance: string): Reply {
  if (format === 'problem') {
    return {
      status: err.status,
      headers: { 'content-type': 'application/problem+json', ...err.headers },
      body: toProblem(err, instance),
    };
  }
  if (format === 'scim') {
    return {
      status: err.status,
      headers: { 'content-type': scimContentType, ...err.headers },
      body: toScimError(err),
    };
  }
  return { status: err.status, headers: { ...err.headers }, body: toCoreBody(err) };
}

/** `reply` when it matches its route's declaration; otherwise a 500 saying how it does not (tests only). */
function checked(route: RouteSpec, reply: Reply, instance: string, log: Logger): Reply {
  const problems = responseProblems(route, reply);
  if (problems.length === 0) return reply;
  const where = `${route.method} ${route.path}`;
  const first = problems.map((p) => `${p.path || '(body)'}: ${p.message}`).join('; ');
  log.error(
    { route: where, status: reply.status, errors: problems },
    'response does not match its declared schema',
  );
  const err = new AppError(
    'RESPONSE_SCHEMA_MISMATCH',
    `${where} answered ${reply.status}, which its declaration does not allow: ${first}`,
  );
  return errorReply(err, route.errorFormat ?? 'core', instance);
}

/** The routes by method and path template, and the error format of a path no route serves. */
function routeTable(routes: RouteSpec[]) {
  const table = new TemplateTable<RouteSpec>();
  for (const r of routes) table.add(r.method, r.path, r);
  const unmatchedFormat = familyFormats<ErrorFormat>(
    routes.map((r) => ({ template: r.path, format: r.errorFormat })),
    'core',
  );
  return { table, unmatchedFormat };
}

/** The edge decided on the raw path; serve only a path that parses to exactly that. */
function requireCanonicalPath(req: IncomingMessage): void {
  const rawPath = (req.url ?? '/').split('?')[0] ?? '/';
  if (!isCanonicalPath(rawPath))
    throw new AppError(
      'VALIDATION_FAILED',
      'request path is not canonical (backslash, dot segment, empty segment or fragment)',
    );
}

/** The headers the route requires and does not check itself are present. */
function requireHeaders(route: RouteSpec, headers: Record<string, string>): void {
  for (const h of route.headers ?? []) {
    if (h.required && !h.handlerChecks && !headers[h.name.toLowerCase()]) throw missingHeader(h.name);
  }
}

/** 405 with `Allow` when the path is served by other methods, else 404. */
function noRoute(table: TemplateTable<RouteSpec>, method: string, path: string): AppError {
  const allowed = table.allowedMethods(path);
  if (allowed.length > 0) {
    return new AppError('METHOD_NOT_ALLOWED', `${method} is not allowed on ${path}`, {
      headers: { allow: allowed.join(', ') },
    });
  }
  return new AppError('NOT_FOUND', `no route for ${method} ${path}`);
}

/** The request's body bytes, within the route's limit (none read for a bodiless request). */
async function requestBody(req: IncomingMessage, res: ServerResponse, route: RouteSpec, method: string) {
  if (!(methodsWithBody.has(method) || req.headers['content-length'] || req.headers['transfer-encoding']))
    return Buffer.alloc(0);
  return readBody(req, route.bodyLimitBytes ?? defaultBodyLimitBytes).catch((err: unknown) => {
    // The rest of an oversized body is never read: the connection cannot carry another request
    // (a proxy's pooled connection reused after it failed the next caller's request).
    if (err instanceof AppError && err.code === 'PAYLOAD_TOO_LARGE') res.setHeader('connection', 'close');
    throw err;
  });
}

/** Body, query and path parameters decoded and checked against the route's schemas. */
function routeInputs(
  route: RouteSpec,
  pathParams: Record<string, string>,
  search: string,
  contentType: string | undefined,
  rawBody: Buffer,
) {
  const kind = route.bodyKind ?? (route.body ? 'json' : 'none');
  const decoded = decodeBody(kind, contentType, rawBody, route.bodyStructure);
  const body = route.body ? validate(route.body, decoded, 'body') : storable(decoded, 'body');
  const query = route.query ? validate(route.query, parseQuery(search), 'query', true) : {};
  const params = route.params ? validate(route.params, pathParams, 'params') : storable(pathParams, 'params');
  return { body, query, params };
}

/** A refusal names its code; an unexpected error is logged whole (its SQLSTATE included). */
function logOutcome(
  log: Logger,
  o: { method: string; route: string; status: number; seconds: number; code: string | undefined },
  err: unknown,
): void {
  const line = {
    method: o.method,
    route: o.route,
    status: o.status,
    ms: Math.round(o.seconds * 1e4) / 10,
    ...(o.code ? { code: o.code } : {}),
  };
  if (err !== undefined)
    log.error({ ...line, err: err instanceof Error ? err : String(err) }, 'request failed');
  else if (o.status >= 500) log.warn(line, 'request unavailable');
  else log.info(line, 'request');
}

/**
 * SPEC 5.4.5: what the edge counted from the request is given back when the request moved
 * nothing: refused or failed (4xx), or a replay of a stored response. A 5xx keeps it: the
 * movement may have committed before the failure.
 */
async function settleBudget(
  deps: HttpDeps,
  money: MoneyScope | undefined,
  reply: Reply,
  log: Logger,
): Promise<void> {
  if (!deps.releaseBudget || money?.movement !== 'request' || !money.edgeCount) return;
  const replayed = reply.headers?.['idempotent-replayed'] === 'true';
  if (!replayed && !(reply.status >= 400 && reply.status < 500)) return;
  await deps
    .releaseBudget(money)
    .catch((e: unknown) => log.warn({ err: (e as Error).message }, 'API-key budget release failed'));
}

/** Build the request listener; `createCoreServer` wraps it in an http.Server. */
export function createHandler(deps: HttpDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { table, unmatchedFormat } = routeTable(deps.routes);
  const fromEdge = edgeChecker(deps.edgeSecrets);

  return (req, res) => {
    const started = process.hrtime.bigint();
    const requestId = requestIdOf(req);
    const method = (req.method ?? 'GET').toUpperCase();
    const url = new URL(req.url ?? '/', 'http://core.invalid');
    const path = url.pathname;
    const match = table.find(method, path);
    const route = match?.entry;
    const template = route?.path ?? 'unmatched';
    const log = deps.log.child({ reqId: requestId });

    const finish = (given: Reply, err?: unknown, code?: string) => {
      const reply = deps.checkResponses && route ? checked(route, given, path, log) : given;
      send(res, reply, requestId, method);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      deps.metrics.httpDuration.observe({ method, route: template, status: String(reply.status) }, seconds);
      logOutcome(log, { method, route: template, status: reply.status, seconds, code }, err);
    };

    let money: MoneyScope | undefined;
    const run = async (): Promise<Reply> => {
      requireCanonicalPath(req);
      if (!match || !route) throw noRoute(table, method, path);
      const headers = flatHeaders(req);
      const identity = identityOf(headers, fromEdge);
      const scope = moneyScopeOf(route.path, route.movesMoney, identity);
      money = scope;
      requireHeaders(route, headers);
      const rawBody = await requestBody(req, res, route, method);
      const { body, query, params } = routeInputs(
        route,
        match.params,
        url.search,
        req.headers['content-type'],
        rawBody,
      );
      const asker = { principalId: identity.principalId, method, route: route.path, requestId };
      await deps.residency?.(tenantsNamed(identity, params, query, body), asker);
      // Issue 20 item 5: every audit record the handler writes carries this request's decision.
      const facts = auditFactsOf(headers, identity, requestId, req.socket.remoteAddress);
      return withRequestAudit(facts, () =>
        inMoneyScope(scope, () =>
          route.handler({
            req,
            method: method as Method,
            path,
            template,
            params,
            query,
            body,
            rawBody,
            headers,
            requestId,
            log,
            identity,
            routeRoles: route.roles ?? [],
          }),
        ),
      );
    };

    run().then(
      async (reply) => {
        await settleBudget(deps, money, reply, log);
        finish(reply);
      },
      async (err: unknown) => {
        const appErr = asAppError(err);
        if (res.headersSent) {
          res.destroy();
          return;
        }
        const reply = errorReply(appErr, route?.errorFormat ?? unmatchedFormat(path), path);
        await settleBudget(deps, money, reply, log);
        finish(reply, appErr.code === 'INTERNAL' || isInputDataException(err) ? err : undefined, appErr.code);
      },
    );
  };
}

export function createCoreServer(deps: HttpDeps): Server {
  // Above what the edge passes (60 KiB: envoy.yaml, edge/gateway.ts) plus the identity headers it
  // adds, so core never resets a request the edge let through.
  const server = createServer(
    { requestTimeout: 30_000, headersTimeout: 10_000, maxHeaderSize: 80 * 1024 },
    createHandler(deps),
  );
  server.keepAliveTimeout = 5_000;
  return server;
}
