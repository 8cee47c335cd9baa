/**
 * build(deps) for the edge process: cached state from PostgreSQL, the verified policy bundle
 * (watched for new versions), the decision audit writer, and the ext_authz gRPC server.
 */
import type { KeyObject } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import type { Db } from '../shared/db/pool.ts';
import { reportNotReady, StartupSteps, type WaitingFor } from '../shared/startup.ts';
import { ApiKeySecrets } from '../shared/api-key-secrets.ts';
import { ChallengeKeys } from '../shared/challenge.ts';
import { TokenVerifier } from '../shared/token-keys.ts';
import { AuditThread, AuditWriter, failClosedReserve, inlineSink, maxQueued } from './audit-writer.ts';
import type { DecisionInputsConfig } from './decision-inputs.ts';
import { ShadowFeed } from './shadow.ts';
import type { Registry as PurposeRegistry } from '../policy/runtime/bundle.ts';
import { CredentialGuard, RateLimiter } from './auth/rate-limit.ts';
import { RiskEngine } from './auth/risk.ts';
import { createDecider, failClosedAuditor } from './authz.ts';
import { defaultBundleDir, loadTrustedKeys } from '../policy/runtime/bundle.ts';
import { PolicyStore } from '../policy/runtime/store.ts';
import { addHealthService } from './health.ts';
import { createEdgeMetrics, type EdgeMetrics } from './metrics.ts';
import { bundleRouteTable } from './routes.ts';
import { bindEdge, createEdgeServer } from './server.ts';
import { EdgeState } from './state/store.ts';
import { warmEdge } from './warm.ts';

export interface EdgeDeps {
  db: Db;
  /**
   * The edge's secrets, by need (DESIGN "Modes, secrets and who holds them"): the key that opens
   * API-key secrets, and the step-up challenge keys (current first). It holds no private key that
   * can sign an access token: tokens are verified with the tenant key sets' public halves.
   */
  apiKeySealKey: Buffer;
  challengeKeys: Buffer[];
  /** ISSUER_URL: client-credentials tokens may carry it as `iss` (issue 17 item 5). */
  issuerUrl?: string | undefined;
  log: Logger;
  edgeSecret: string;
  /** A directory or http(s) URL holding manifest.json, registry.json and policy.wasm. */
  bundleSource?: string;
  /** Trusted bundle signers (default: the repository's trust file, development). */
  trustedKeys?: KeyObject[];
  /** The decision budget (default 100 ms, SPEC 8); only tests on a loaded machine raise it. */
  budgetMs?: number;
  /** Public-route flood limit per source address and route (defaults in auth/rate-limit.ts). */
  publicRateLimit?: { perMinute: number; burst: number };
  /** Wrong SCIM credentials and service tokens per source address (defaults in auth/rate-limit.ts). */
  credentialGuessLimit?: { perMinute: number; burst: number };
  now?: () => number;
  /** When set, the decision audit is written by a worker thread with its own pool on this URL. */
  databaseUrl?: string;
  /**
   * Where the edge's metrics are registered (issue 15 item 6): the process's registry, served on
   * EDGE_METRICS_PORT by `npm run edge`, or core's under `npm start` (one /v1/metrics). Default: a new one.
   */
  registry?: Registry;
  /** Issue 22 item 1: record decision inputs for replay (off when unset). */
  decisionInputs?: DecisionInputsConfig;
}

export interface Edge {
  server: grpc.Server;
  state: EdgeState;
  policies: PolicyStore;
  audit: AuditWriter;
  /** Decision counts, latency, fail-closed reasons, state age, audit queue, policy version. */
  metrics: EdgeMetrics;
  /** Issue 15 item 9: load and rehearse what the first Checks need; call before listen(). */
  warm(): Promise<void>;
  /** True once warm() has finished: readiness reports it. */
  readonly warmed: boolean;
  listen(port: number, host?: string): Promise<number>;
  /**
   * Whether the gRPC health protocol answers SERVING (see edge/health.ts): once warmed, with a
   * policy and fresh state, until it drains. Before warm-up its first Checks would meet cold
   * caches and pools and fail closed (the warm-up's reason to be).
   */
  serving(): boolean;
  /**
   * What the edge waits for before it is ready (empty once it is): start-up steps under way, the
   * policy bundle, the database listener, the warm-up; each with its last error. Said at warn
   * when it lasts (shared/startup.ts reportNotReady) and named by /ready.
   */
  waiting(): WaitingFor[];
  /** Health turns NOT_SERVING, new calls are refused, calls in flight finish (at most `graceMs`). */
  drain(graceMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/** retention_days by purpose, one map per registry (looked up once per recorded decision). */
const retentionMaps = new WeakMap<PurposeRegistry, Map<string, number>>();
function retentionOf(registry: PurposeRegistry | undefined, purpose: string): number | undefined {
  if (!registry) return undefined;
  let m = retentionMaps.get(registry);
  if (!m) {
    m = new Map(registry.purposes.map((p) => [p.name, p.retention_days]));
    retentionMaps.set(registry, m);
  }
  return m.get(purpose);
}

/** The step-up challenge keys: the current one signs, the previous ones still verify. */
function challengeKeysOf(deps: EdgeDeps): ChallengeKeys {
  const [challengeKey, ...previousChallengeKeys] = deps.challengeKeys;
  if (!challengeKey) throw new Error('the edge needs a step-up challenge key');
  return new ChallengeKeys(challengeKey, previousChallengeKeys, deps.now ? { now: deps.now } : {});
}

/** The decision audit writer, started: on its own thread when the edge has a database URL. */
function startAudit(deps: EdgeDeps, policies: PolicyStore): AuditWriter {
  // Issue 22 item 1: the audit's sink also records decision inputs (on its thread when it has one).
  const di = deps.decisionInputs;
  const recorded = di ? { key: di.key, retentionHours: di.retentionHours, maxBytes: di.maxBytes } : undefined;
  const audit = new AuditWriter(
    deps.db,
    deps.log,
    maxQueued,
    failClosedReserve,
    deps.databaseUrl ? new AuditThread(deps.databaseUrl, undefined, recorded) : inlineSink(deps.db, recorded),
  );
  if (di)
    audit.recordInputs({
      sample: di.sample,
      retentionDays: (purpose) => retentionOf(policies.current?.registry, purpose),
    });
  audit.start();
  return audit;
}

/** Issue 22 item 3: shadow candidates need a thread with its own pool, so an edge with a database URL. */
function startShadow(deps: EdgeDeps, trustedKeys: KeyObject[]): ShadowFeed | undefined {
  const shadow = deps.databaseUrl
    ? new ShadowFeed({
        db: deps.db,
        databaseUrl: deps.databaseUrl,
        trustedKeys,
        log: deps.log,
        ...(deps.decisionInputs ? { inputKey: deps.decisionInputs.key } : {}),
      })
    : undefined;
  shadow?.start();
  return shadow;
}

/** Calls in flight finish, for at most `graceMs`; then the server is shut down by force. */
function drainServer(server: grpc.Server, graceMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const force = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    force.unref();
    server.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
}

/** The decision function over the edge's state, keys, policies and audit, with its limits and risk engine. */
function deciderOf(
  deps: EdgeDeps,
  parts: {
    state: EdgeState;
    challenges: ChallengeKeys;
    policies: PolicyStore;
    audit: AuditWriter;
    shadow: ShadowFeed | undefined;
  },
) {
  const { state, challenges, policies, audit, shadow } = parts;
  return createDecider({
    state,
    challenges,
    policies,
    audit,
    ...(shadow ? { shadow } : {}),
    risk: new RiskEngine(deps.now),
    limiter: new RateLimiter(deps.publicRateLimit?.perMinute, deps.publicRateLimit?.burst),
    credentialGuard: new CredentialGuard(
      deps.credentialGuessLimit?.perMinute,
      deps.credentialGuessLimit?.burst,
    ),
    log: deps.log,
    edgeSecret: deps.edgeSecret,
    now: deps.now,
  });
}

/** The edge's metrics, in the process's registry when it gives one. */
function metricsOf(
  deps: EdgeDeps,
  parts: { state: EdgeState; audit: AuditWriter; policies: PolicyStore; shadow: ShadowFeed | undefined },
): EdgeMetrics {
  const { state, audit, policies, shadow } = parts;
  return createEdgeMetrics(deps.registry ?? new Registry(), {
    stateAgeS: () => state.ageSeconds(),
    cacheEntries: () => state.cacheSizes(),
    auditQueued: () => audit.pending(),
    auditUnrecorded: () => audit.unrecordedCount(),
    policy: () => policies.current,
    decisionInputs: () => ({ ...audit.inputStats() }),
    ...(shadow ? { shadow: () => ({ ...shadow.stats }) } : {}),
  });
}

/** What the edge waits for before it is ready (Edge.waiting). */
function waitingOf(parts: {
  steps: StartupSteps;
  state: EdgeState;
  policies: PolicyStore;
  warmed: () => boolean;
  draining: () => boolean;
}): () => WaitingFor[] {
  const { steps, state, policies } = parts;
  return () => {
    const underWay = steps.waiting();
    const listenerError = state.listenerError();
    return [
      ...(listenerError === undefined ? [] : [{ what: 'database listener', lastError: listenerError }]),
      ...underWay,
      ...(policies.current?.routes === undefined ? [{ what: 'a verified policy bundle' }] : []),
      ...(parts.warmed() || underWay.length > 0 ? [] : [{ what: 'warm-up' }]),
      ...(parts.draining() ? [{ what: 'stopping' }] : []),
    ];
  };
}

export async function buildEdge(deps: EdgeDeps): Promise<Edge> {
  const source = deps.bundleSource ?? defaultBundleDir;
  const trustedKeys = deps.trustedKeys ?? (await loadTrustedKeys());
  const policies = new PolicyStore(trustedKeys, deps.log);
  await policies.load(source);
  policies.watch(source);
  const challenges = challengeKeysOf(deps);
  const state = new EdgeState(
    deps.db,
    new TokenVerifier(deps.db, { now: deps.now, issuerUrl: deps.issuerUrl }),
    new ApiKeySecrets(deps.apiKeySealKey),
    deps.log,
    { now: deps.now },
  );
  await state.start();
  const audit = startAudit(deps, policies);
  const shadow = startShadow(deps, trustedKeys);
  const decide = deciderOf(deps, { state, challenges, policies, audit, shadow });

  const metrics = metricsOf(deps, { state, audit, policies, shadow });
  // The route table is the current bundle's (issue 21 item 1): swapped with the policy.
  const resolve = bundleRouteTable(policies);
  const server = createEdgeServer({
    log: deps.log,
    decide,
    resolve,
    failClosed: failClosedAuditor({ audit, policies }),
    metrics,
    ...(deps.budgetMs ? { budgetMs: deps.budgetMs } : {}),
  });
  let warmed = false;
  let draining = false;
  const serving = () => warmed && !draining && policies.current?.routes !== undefined && state.isFresh();
  addHealthService(server, serving);
  const steps = new StartupSteps(deps.log);
  const waiting = waitingOf({ steps, state, policies, warmed: () => warmed, draining: () => draining });
  const stopReports = reportNotReady(deps.log, 'edge', waiting);
  return {
    server,
    state,
    policies,
    audit,
    metrics,
    serving,
    waiting,
    async warm() {
      await warmEdge({
        resolve,
        db: deps.db,
        state,
        challenges,
        policies,
        audit,
        log: deps.log,
        edgeSecret: deps.edgeSecret,
        steps,
      });
      warmed = true;
    },
    get warmed() {
      return warmed;
    },
    listen: (port, host) => bindEdge(server, port, host),
    async drain(graceMs = 5000) {
      draining = true;
      stopReports();
      await drainServer(server, graceMs);
    },
    async stop() {
      draining = true;
      stopReports();
      steps.stop();
      server.forceShutdown();
      policies.stop();
      await shadow?.stop();
      await audit.stop();
      await state.stop();
    },
  };
}
