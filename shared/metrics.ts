/** Prometheus metrics of one core process (its own registry, so tests can build several). */
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  httpDuration: Histogram<'method' | 'route' | 'status'>;
  dbDuration: Histogram<'op' | 'outcome'>;
  /** Transactions retried after a serialization failure (40001) or a deadlock (40P01). */
  dbTxRetries: Counter<'code'>;
  /** Webhook deliveries this process's dispatcher gave up on (DEAD after the bounded attempts). */
  webhookDeadLettered: Counter;
}

/** Buckets in seconds: sub-millisecond reads up to multi-second argon2 bursts. */
const latencyBucketsS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const httpDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration by method, route template and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: latencyBucketsS,
    registers: [registry],
  });
  const dbDuration = new Histogram({
    name: 'db_query_duration_seconds',
    help: 'PostgreSQL query duration by statement kind and outcome',
    labelNames: ['op', 'outcome'] as const,
    buckets: latencyBucketsS,
    registers: [registry],
  });
  const dbTxRetries = new Counter({
    name: 'db_tx_retries_total',
    help: 'Transactions retried after a serialization failure (40001) or deadlock (40P01); deadlocks should stay at 0',
    labelNames: ['code'] as const,
    registers: [registry],
  });
  const webhookDeadLettered = new Counter({
    name: 'webhook_deliveries_dead_lettered_total',
    help: 'Webhook deliveries dead-lettered after the bounded attempts (retry them with POST /v1/outbox/{id}:retry)',
    registers: [registry],
  });
  return { registry, httpDuration, dbDuration, dbTxRetries, webhookDeadLettered };
}
