/**
 * The ext_authz gRPC server (`envoy.service.auth.v3.Authorization/Check`). One 100 ms budget
 * covers everything a Check does; past it, or on any error, the answer is a deny with code
 * `authz_unavailable` (SPEC 1: fail closed, SPEC 8: 100 ms).
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { authorizationPackage } from './proto.ts';
import { checkResponseSerializer } from './encode.ts';
import { toCheckResponse, unavailable, viewOf, type Decision, type RequestView } from './check.ts';
import {
  countDecision,
  countFailClosed,
  failClosedReasonOf,
  type EdgeMetrics,
  type FailClosedReason,
} from './metrics.ts';
import type { ResolvedRoute, ResolveRoute } from './routes.ts';
import type { CheckRequest, CheckResponse } from './types.ts';

/** SPEC 8: call timeout to the decision service. */
export const checkBudgetMs = 100;

/** Set once a Check's budget has passed: its answer is already a deny, whatever the decider finds. */
export interface Deadline {
  readonly expired: boolean;
}

export type Decide = (
  view: RequestView,
  resolved: ResolvedRoute,
  deadline: Deadline,
) => Promise<Decision> | Decision;

/**
 * Told of every fail-closed answer (budget passed, decider threw, malformed request) so that it
 * is audited like any other decision. `view`/`resolved` are absent when the request could not be read.
 */
export type FailClosed = (
  view: RequestView | undefined,
  resolved: ResolvedRoute | undefined,
  reason: string,
) => void;

export interface EdgeDeps {
  log: Logger;
  decide: Decide;
  /** Method and path → route: the policy bundle's table (edge/routes.ts `bundleRouteTable`). */
  resolve: ResolveRoute;
  budgetMs?: number;
  failClosed?: FailClosed;
  /** Counts every answer (issue 15 item 6); absent for the warm-up rehearsal, which nobody asked for. */
  metrics?: EdgeMetrics;
}

/** Run one Check within the budget; never throws, never allows on error. */
export async function check(deps: EdgeDeps, req: CheckRequest): Promise<CheckResponse> {
  const resolve = deps.resolve;
  const decide = deps.decide;
  const budgetMs = deps.budgetMs ?? checkBudgetMs;
  let view: RequestView | undefined;
  let resolved: ResolvedRoute | undefined;
  const deadline = { expired: false };
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  const started = deps.metrics ? performance.now() : 0;
  try {
    view = viewOf(req);
    const v = view;
    const r = resolve(v.method, v.path);
    resolved = r;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        deadline.expired = true;
        timedOut = true;
        reject(new Error(`decision exceeded ${budgetMs} ms`));
      }, budgetMs);
    });
    const decision = await Promise.race([Promise.resolve(decide(v, r, deadline)), timeout]);
    // The record object is built only when debug is on: per Check it was garbage for nothing (issue 18 item 1).
    if (deps.log.isLevelEnabled('debug'))
      deps.log.debug(
        {
          reqId: v.requestId,
          method: v.method,
          path: v.path,
          purpose: r.purpose,
          allow: decision.allow,
          code: decision.code,
        },
        'decision',
      );
    if (deps.metrics)
      countDecision(
        deps.metrics,
        r.purpose,
        decision.allow,
        decision.allow ? 'OK' : (decision.code ?? 'POLICY_DENIED'),
        (performance.now() - started) / 1000,
      );
    return toCheckResponse(v, decision, r.errorFormat);
  } catch (err) {
    // A decision that lands after this answer must not be audited as the outcome: it was not.
    deadline.expired = true;
    const reason = (err as Error).message;
    deps.log.warn({ reqId: view?.requestId, err: reason }, 'check failed closed');
    try {
      deps.failClosed?.(view, resolved, reason);
    } catch (auditErr) {
      deps.log.error(
        { reqId: view?.requestId, err: (auditErr as Error).message },
        'fail-closed answer could not be audited',
      );
    }
    if (deps.metrics) {
      const why: FailClosedReason = !view
        ? 'unreadable_request'
        : timedOut
          ? 'budget_exceeded'
          : failClosedReasonOf(err);
      countFailClosed(deps.metrics, why);
      countDecision(
        deps.metrics,
        resolved?.purpose ?? 'unknown',
        false,
        'authz_unavailable',
        (performance.now() - started) / 1000,
      );
    }
    return unavailable(view, 'authorization is unavailable', resolved?.errorFormat);
  } finally {
    clearTimeout(timer);
  }
}

/** The Authorization service with the Check answer written by edge/encode.ts (one buffer, no protobufjs objects). */
function withCheckSerializer(service: grpc.ServiceDefinition, log: Logger): grpc.ServiceDefinition {
  const check = service.Check as grpc.MethodDefinition<CheckRequest, CheckResponse>;
  // The answer is still right (the generic serialiser wrote it); the hand-written path has a gap to close.
  const fellBack = () =>
    log.error('Check answer refused by the hand-written encoder; the generic serialiser wrote it');
  return {
    ...service,
    Check: { ...check, responseSerialize: checkResponseSerializer(check.responseSerialize, fellBack) },
  };
}

export function createEdgeServer(deps: EdgeDeps): grpc.Server {
  const server = new grpc.Server();
  const { Authorization } = authorizationPackage();
  server.addService(withCheckSerializer(Authorization.service, deps.log), {
    Check: (
      call: grpc.ServerUnaryCall<CheckRequest, CheckResponse>,
      callback: grpc.sendUnaryData<CheckResponse>,
    ) => {
      check(deps, call.request).then(
        (r) => callback(null, r),
        () => callback(null, unavailable(undefined, 'authorization is unavailable')),
      );
    },
  });
  return server;
}

/** Bind on host:port (0 = free port) and return the bound port. */
export function bindEdge(server: grpc.Server, port: number, host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) =>
      err ? reject(err) : resolve(bound),
    );
  });
}
