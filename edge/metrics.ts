/**
 * Prometheus metrics of one edge process (issue 15 item 6). The hot path only increments
 * counters and observes one histogram per Check; every label value comes from a closed set
 * (purposes from the route table, allow/deny, the deny codes of edge/check.ts, the fail-closed
 * reasons below), never from the request. Gauges are read when scraped, not kept up to date.
 */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { WaitingFor } from '../shared/startup.ts';

/** Why a Check was answered `authz_unavailable` (fail closed, SPEC 1). */
export type FailClosedReason =
  /** The decision passed its 100 ms budget (SPEC 8). */
  | 'budget_exceeded'
  /** The cached state has not heard from PostgreSQL within the staleness bound (edge/state/store.ts). */
  | 'stale_state'
  /** The decision audit is too far behind to record another decision (edge/audit-writer.ts). */
  | 'audit_overloaded'
  /** No verified policy bundle is loaded. */
  | 'no_policy'
  /** The CheckRequest carried no HTTP method or path. */
  | 'unreadable_request'
  /** Anything else the decision threw. */
  | 'error';

/** A failure that denies every decision for a known reason: counted under it. */
export class FailClosedError extends Error {
  constructor(
    readonly reason: FailClosedReason,
    message: string,
  ) {
    super(message);
    this.name = 'FailClosedError';
  }
}

export function failClosedReasonOf(err: unknown): FailClosedReason {
  return err instanceof FailClosedError ? err.reason : 'error';
}

/** Seconds: sub-millisecond cache hits up to the 100 ms budget; slower lands in +Inf. */
export const decisionBucketsS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];

export interface EdgeMetrics {
  registry: Registry;
  decisions: Counter<'purpose' | 'outcome' | 'code'>;
  decisionSeconds: Histogram<'outcome'>;
  budgetExceeded: Counter;
  failClosed: Counter<'reason'>;
  staleDenials: Counter;
}

/** What the gauges read at scrape time. */
export interface EdgeGaugeSources {
  /** Seconds since the cached state last heard from PostgreSQL. */
  stateAgeS(): number;
  /** Entries per in-memory cache (sessions, tenants, ...). */
  cacheEntries(): Record<string, number>;
  auditQueued(): number;
  auditUnrecorded(): number;
  policy(): { policyVersion: string; registryVersion: string } | undefined;
  /** Issue 22 item 1: decision inputs recorded, sampled out, failed, expired, dropped partitions, bytes kept. */
  decisionInputs?(): Record<string, number>;
  /** Issue 22 item 3: shadow evaluation: evaluated, divergent, errors, dropped, timeouts, ended (totals), active and suspended shadows. */
  shadow?(): Record<string, number>;
}

/**
 * The edge's metrics in `registry` (the process's own, or core's under `npm start` so that
 * /v1/metrics includes them). One set per registry: prom-client refuses a name twice.
 */
export function createEdgeMetrics(registry: Registry, sources: EdgeGaugeSources): EdgeMetrics {
  const registers = [registry];
  const metrics: EdgeMetrics = {
    registry,
    decisions: new Counter({
      name: 'edge_decisions_total',
      help: 'Check answers by purpose (route table), outcome (allow/deny) and code (OK or the deny code)',
      labelNames: ['purpose', 'outcome', 'code'] as const,
      registers,
    }),
    decisionSeconds: new Histogram({
      name: 'edge_decision_duration_seconds',
      help: 'Time from reading a CheckRequest to its answer, by outcome (the budget is 100 ms, SPEC 8)',
      labelNames: ['outcome'] as const,
      buckets: decisionBucketsS,
      registers,
    }),
    budgetExceeded: new Counter({
      name: 'edge_decision_budget_exceeded_total',
      help: 'Checks whose decision passed the 100 ms budget and were answered authz_unavailable (SPEC 8)',
      registers,
    }),
    failClosed: new Counter({
      name: 'edge_fail_closed_total',
      help: 'Checks answered authz_unavailable, by reason (budget_exceeded, stale_state, audit_overloaded, no_policy, unreadable_request, error)',
      labelNames: ['reason'] as const,
      registers,
    }),
    staleDenials: new Counter({
      name: 'edge_state_stale_denials_total',
      help: 'Checks denied because the cached state had not heard from PostgreSQL within the staleness bound',
      registers,
    }),
  };
  gauges(registers, sources);
  return metrics;
}

function gauges(registers: Registry[], s: EdgeGaugeSources): void {
  new Gauge({
    name: 'edge_state_age_seconds',
    help: 'Seconds since the edge state last heard from PostgreSQL (decisions deny past 5 s)',
    registers,
    collect() {
      this.set(s.stateAgeS());
    },
  });
  new Gauge({
    name: 'edge_cache_entries',
    help: 'Entries held by each in-memory cache of the edge state',
    labelNames: ['cache'] as const,
    registers,
    collect() {
      for (const [cache, n] of Object.entries(s.cacheEntries())) this.set({ cache }, n);
    },
  });
  new Gauge({
    name: 'edge_audit_queue_depth',
    help: 'Decision audit entries queued and not yet written (decisions stop at 20000)',
    registers,
    collect() {
      this.set(s.auditQueued());
    },
  });
  new Gauge({
    name: 'edge_audit_unrecorded',
    help: 'Fail-closed denials past the audit reserve, counted and awaiting their one authz.unrecorded entry',
    registers,
    collect() {
      this.set(s.auditUnrecorded());
    },
  });
  // Issue 22: decision inputs recorded for replay, and shadow evaluation, one gauge each by `stat`.
  if (s.decisionInputs)
    statGauge(
      registers,
      'edge_decision_inputs',
      'Decision inputs kept for replay (issue 22): recorded, sampledOut, failed, expiredRows, droppedPartitions (totals since start); bytes and partitions kept now',
      s.decisionInputs,
    );
  if (s.shadow)
    statGauge(
      registers,
      'edge_policy_shadow',
      'Shadow candidates (issue 22): decisions evaluated, divergent from the live answer, errors (no decision), dropped, timeouts, threads a candidate ended (totals since start); active and suspended shadows now',
      s.shadow,
    );
  new Gauge({
    name: 'edge_policy_info',
    help: 'The policy bundle decisions use now (value 1; labels name its versions)',
    labelNames: ['policy_version', 'registry_version'] as const,
    registers,
    collect() {
      this.reset();
      const p = s.policy();
      if (p) this.set({ policy_version: p.policyVersion, registry_version: p.registryVersion }, 1);
    },
  });
}

/** A gauge labelled by `stat`, read from `read()` when scraped. */
function statGauge(
  registers: Registry[],
  name: string,
  help: string,
  read: () => Record<string, number>,
): void {
  new Gauge({
    name,
    help,
    labelNames: ['stat'] as const,
    registers,
    collect() {
      for (const [stat, n] of Object.entries(read())) this.set({ stat }, n);
    },
  });
}

/** Count one Check answer; `seconds` from reading the request to the answer. */
export function countDecision(
  m: EdgeMetrics,
  purpose: string,
  allow: boolean,
  code: string,
  seconds: number,
): void {
  const outcome = allow ? 'allow' : 'deny';
  m.decisions.inc({ purpose, outcome, code });
  m.decisionSeconds.observe({ outcome }, seconds);
}

/** Count one fail-closed answer under its reason (and its own counters for budget and staleness). */
export function countFailClosed(m: EdgeMetrics, reason: FailClosedReason): void {
  m.failClosed.inc({ reason });
  if (reason === 'budget_exceeded') m.budgetExceeded.inc();
  if (reason === 'stale_state') m.staleDenials.inc();
}

/**
 * The edge process's HTTP side port (EDGE_METRICS_PORT): `/metrics` for Prometheus (the registry
 * the edge's metrics are in), `/ready` for the kubelet's readiness (as gRPC health: NOT_SERVING
 * when the edge would only deny; its body names what it waits for) and `/health` for its
 * liveness: the process answers, whatever the database does, so a database blip takes edges out
 * of rotation without restarting every one (issue 19 item 1; deploy/k8s/edge.yaml).
 */
export function createOpsServer(
  registry: Registry,
  ready: () => boolean,
  waiting: () => WaitingFor[] = () => [],
): Server {
  return createServer((req, res) => {
    if (req.url === '/metrics') {
      registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': registry.contentType });
          res.end(text);
        },
        () => res.writeHead(500).end(),
      );
    } else if (req.url === '/health') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    } else if (req.url === '/ready') {
      const ok = ready();
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' });
      // What it waits for, by name only (the errors behind them are in the log).
      const names = ok ? [] : waiting().map((w) => w.what);
      res.end(JSON.stringify(ok ? { status: 'ready' } : { status: 'not ready', waiting: names }));
    } else {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end('{"code":"NOT_FOUND","message":"no such route"}');
    }
  });
}
