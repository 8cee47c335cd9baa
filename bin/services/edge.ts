/**
 * `npm run edge`: one edge instance (run N behind Envoy). Reads only its own configuration; holds
 * the public halves of the tenant key sets, the challenge key and the API-key sealing key, never
 * the master key. Serves ext_authz Check and the gRPC health protocol on AUTHZ_PORT, and
 * Prometheus metrics (`/metrics`) and readiness (`/ready`) on EDGE_METRICS_PORT. SIGTERM: health
 * turns NOT_SERVING, new calls are refused, calls in flight finish, the audit queue is flushed.
 */
import { buildEdge } from '../../edge/main.ts';
import { boundHeapGrowth } from '../../edge/heap.ts';
import { createOpsServer } from '../../edge/metrics.ts';
import { createDb } from '../../shared/db/pool.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { listen } from '../../shared/net.ts';
import type { DecisionInputsConfig } from '../../edge/decision-inputs.ts';
import { secretKey, secretKeys, secretText, type ServiceConfig } from '../service-config.ts';
import { configOrExit, exitWhileStarting, fail, loggerOf, onShutdown, trustedSigners } from './common.ts';

/**
 * Issue 22 item 1: recording is on when a sample is configured and a pseudonym key exists
 * (configured, or in development kept in DATA_DIR); production without DECISION_INPUT_KEY records nothing.
 */
async function decisionInputs(config: ServiceConfig): Promise<{ decisionInputs?: DecisionInputsConfig }> {
  const sample = Number(config.values.DECISION_INPUTS_SAMPLE);
  if (!(sample > 0) || (config.mode === 'production' && !config.values.DECISION_INPUT_KEY)) return {};
  return {
    decisionInputs: {
      key: await secretKey(config, 'DECISION_INPUT_KEY', 'decision-input.key'),
      sample,
      retentionHours: Number(config.values.DECISION_INPUTS_RETENTION_HOURS),
      maxBytes: Number(config.values.DECISION_INPUTS_MAX_MB) * 1024 * 1024,
    },
  };
}

async function main(): Promise<void> {
  boundHeapGrowth();
  const config = configOrExit('edge');
  const log = loggerOf(config, 'edge');
  const starting = exitWhileStarting(log);
  const databaseUrl =
    config.values.DATABASE_URL ??
    fail('DATABASE_URL is required (the edge reads sessions, keys and settings from PostgreSQL)', 2);
  const metrics = createMetrics();
  const db = createDb({ connectionString: databaseUrl, metrics, log });
  const edge = await buildEdge({
    db,
    log,
    databaseUrl,
    issuerUrl: config.values.ISSUER_URL,
    // The edge's own metrics beside the process and pool metrics, all on EDGE_METRICS_PORT /metrics.
    registry: metrics.registry,
    apiKeySealKey: await secretKey(config, 'API_KEY_SEAL_KEY', 'api-key-seal.key'),
    challengeKeys: await secretKeys(config, 'CHALLENGE_KEY', 'challenge.key'),
    edgeSecret: await secretText(config, 'EDGE_SHARED_SECRET', 'edge-shared-secret.key'),
    trustedKeys: await trustedSigners(config),
    ...(config.values.POLICY_BUNDLE ? { bundleSource: config.values.POLICY_BUNDLE } : {}),
    ...(await decisionInputs(config)),
  }).catch((err: unknown) => fail(`edge failed to start: ${(err as Error).message}`));
  // Issue 15 item 9: caches, pool and decision path warm before the first Check is accepted.
  // Warm-up waits for PostgreSQL and the audit thread however long they take, saying at warn what
  // it waits for after a few seconds (shared/startup.ts): exiting on one failed connect left an
  // edge that was never ready.
  await edge.warm().catch((err: unknown) => fail(`edge failed to warm up: ${(err as Error).message}`));
  const port = await edge
    .listen(Number(config.values.AUTHZ_PORT), config.values.AUTHZ_HOST)
    .catch((err: unknown) =>
      fail(`cannot listen on AUTHZ_PORT ${config.values.AUTHZ_PORT}: ${(err as Error).message}`),
    );

  // Metrics and readiness for Prometheus and the kubelet (HTTP, beside the gRPC port).
  const ops = createOpsServer(edge.metrics.registry, () => edge.serving(), edge.waiting);
  const opsPort = await listen(ops, Number(config.values.EDGE_METRICS_PORT), config.values.AUTHZ_HOST).catch(
    (err: unknown) =>
      fail(
        `cannot listen on EDGE_METRICS_PORT ${config.values.EDGE_METRICS_PORT}: ${(err as Error).message}`,
      ),
  );
  log.info({ port, metricsPort: opsPort }, 'edge is serving');
  starting();

  onShutdown(log, async () => {
    await edge.drain(5000);
    await edge.stop();
    ops.close();
    await db.close();
  });
}

main().catch((err: unknown) => fail(`edge failed to start: ${(err as Error).message}`));
