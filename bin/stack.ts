/**
 * Start and stop the whole stack from a Config. Used by `npm start` and by end-to-end tests
 * (which pass port 0 everywhere and their own DATABASE_URL).
 */
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { buildCore } from '../core/app.ts';
import { loadLedgerCurrencies } from '../core/admin/reference/currencies.ts';
import { startEmbedded, type EmbeddedServer } from '../core/db/embedded.ts';
import { migrate } from '../core/db/migrate.ts';
import { labelCluster } from '../core/residency/cluster.ts';
import { createDb, databaseUnreachable, warmPool, type Db } from '../shared/db/pool.ts';
import { StartupSteps } from '../shared/startup.ts';
import { loadOrCreateMasterKey } from '../shared/sealing.ts';
import { ApiKeys } from '../core/apikeys/store.ts';
import { defaultBundleDir, loadTrustedKeys } from '../policy/runtime/bundle.ts';
import { PolicyStore } from '../policy/runtime/store.ts';
import {
  KeyStore,
  deriveApiKeySealKey,
  deriveChallengeKey,
  deriveDecisionInputKey,
} from '../core/keys/keys.ts';
import { readBuildInfo } from '../core/platform/build-info.ts';
import { createLogger } from '../shared/log.ts';
import { createMetrics } from '../shared/metrics.ts';
import { seedDemo } from '../core/seed.ts';
import { createGateway, type Gateway } from '../edge/gateway.ts';
import { buildEdge } from '../edge/main.ts';
import { demoDocExamples, edgeRouteAccess } from './docs.ts';
import { Dispatcher } from '../core/admin/webhooks/dispatcher.ts';
import { Housekeeper } from '../core/housekeeping/prune.ts';
import { LapsedPayerSweeper } from '../core/payments/lapsed-payers.ts';
import { freePort, listen } from '../shared/net.ts';
import type { Config } from './config.ts';

/** A start-up failure that is the operator's to fix; its message is one line. */
export class StartError extends Error {}

export interface Stack {
  /** `gatewayTls`: the gateway's mutual-TLS listener, when asked for. */
  ports: { gateway: number; core: number; authz: number; gatewayTls?: number };
  embedded: EmbeddedServer | undefined;
  db: Db;
  log: Logger;
  demo: Record<string, unknown>;
  stop(): Promise<void>;
}

async function listenOrExplain(server: Server, port: number, name: string): Promise<number> {
  try {
    return await listen(server, port);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'EADDRINUSE') throw new StartError(`port ${port} (${name}) is already in use`);
    throw new StartError(`cannot listen on port ${port} (${name}): ${(err as Error).message}`);
  }
}

/** How long start-up waits for the stack to answer through the gateway before giving up. */
const answerWithinMs = 60_000;
/** Rounds of concurrent ready requests once the stack answers: they warm the paths a client takes. */
const readyRounds = 3;
/** Requests per round: the gateway's connections to core and the HTTP paths warm too, not one of each. */
const readyConcurrency = 8;

/**
 * Issue 15 item 9: "up" only once the stack answers, through the gateway, as a client would:
 * /v1/ready passes the edge (route, policy, audit) to core, which checks the database and the
 * edge's warmth.
 */
async function answering(gateway: string): Promise<void> {
  const until = Date.now() + answerWithinMs;
  let last = 'no answer';
  const probe = async (): Promise<boolean> => {
    try {
      const res = await fetch(`${gateway}/v1/ready`);
      const body = await res.text();
      if (res.status !== 200) last = `${res.status} ${body.slice(0, 120)}`;
      return res.status === 200;
    } catch (err) {
      last = (err as Error).message;
      return false;
    }
  };
  while (!(await probe())) {
    if (Date.now() > until)
      throw new StartError(
        `the stack did not answer through the gateway within ${answerWithinMs / 1000} s (last: ${last}); is the machine overloaded?`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
  // It answers; a few concurrent rounds open the gateway's connections to core and warm the paths.
  for (let i = 0; i < readyRounds; i++) await Promise.all(Array.from({ length: readyConcurrency }, probe));
}

export interface StackOptions {
  logDestination?: NodeJS.WritableStream;
  checkTimeoutMs?: number;
  publicRateLimit?: { perMinute: number; burst: number };
  credentialGuessLimit?: { perMinute: number; burst: number };
  /** Webhooks may target private/loopback addresses: the development `npm start` only (off by default). */
  webhookAllowPrivateTargets?: boolean;
  /** Tests only (issue 15 item 4): core checks every response against its declared schema. */
  checkResponses?: boolean;
  /** Tests only: a policy-impact page's deadline (a looping candidate's job fails sooner than 20 s). */
  impactPageDeadlineMs?: number;
  /** Issue 17 item 4: a mutual-TLS listener for machine clients (tests; production runs Envoy). */
  gatewayTls?: { key: string | Buffer; cert: string | Buffer; clientCa: string | Buffer; port?: number };
}

/** What start-up has opened so far, closed in reverse order by `stop` (also when a later step fails). */
interface Lifetime {
  stopping: boolean;
  cleanups: (() => Promise<unknown>)[];
}

/**
 * `checkTimeoutMs` overrides the gateway's 100 ms Check deadline and the edge's 100 ms decision
 * budget; only tests on a loaded machine use it, so functional assertions do not depend on
 * scheduling (the deadlines themselves have their own tests).
 */
export async function startStack(config: Config, opts: StackOptions = {}): Promise<Stack> {
  const log = createLogger(config.logLevel, opts.logDestination);
  const life: Lifetime = { stopping: false, cleanups: [] };
  const stop = async () => {
    life.stopping = true;
    for (const c of life.cleanups.reverse())
      await c().catch((err: unknown) => log.warn({ err: (err as Error).message }, 'stop step failed'));
    life.cleanups.length = 0;
  };
  try {
    const { ports, embedded, db, demo } = await startParts(config, opts, log, life);
    return { ports, embedded, db, log, demo, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The database, edge, core and gateway, in that order, each registering how it stops. */
async function startParts(
  config: Config,
  opts: StackOptions,
  log: Logger,
  life: Lifetime,
): Promise<Omit<Stack, 'log' | 'stop'>> {
  const { embedded, databaseUrl } = await databaseOf(config, log, life);
  const metrics = createMetrics();
  const db = createDb({ connectionString: databaseUrl, metrics, log });
  life.cleanups.push(() => db.close());
  await prepareDatabase(config, db, log);
  const masterKey = await loadOrCreateMasterKey(config.masterKey, join(config.dataDir, 'master.key'));
  const keys = new KeyStore(db, masterKey, { issuerUrl: config.issuerUrl });
  // Core trusts identity headers only when they carry this secret, which only the edge sets.
  const edgeSecret = randomBytes(32).toString('base64url');
  // API-key secrets sealed with the master key before they had a key of their own (0790).
  await new ApiKeys(db, keys).resealLegacySecrets();
  const demo = await seedDemo(db, config.dataDir, {
    keys,
    ...(config.gatewayPort ? { gatewayUrl: `http://127.0.0.1:${config.gatewayPort}` } : {}),
  });

  const edge = await startEdge(config, opts, { databaseUrl, metrics, log, masterKey, edgeSecret }, life);
  const corePolicies = await corePolicyStore(config, log, life);
  // Staff passkeys: configured origins, else the gateway's localhost origin once it listens.
  const webauthn = {
    rpId: config.webauthnRpId,
    rpName: 'Payments platform staff',
    origins: [...config.webauthnOrigins],
  };
  const core = buildCore({
    db,
    log: log.child({ component: 'core' }),
    metrics,
    build: readBuildInfo(),
    keys,
    dataDir: config.dataDir,
    edgeSecrets: [edgeSecret],
    policies: corePolicies,
    edgeWarm: () => edge.warmed,
    webhookAllowPrivateTargets: opts.webhookAllowPrivateTargets ?? false,
    checkResponses: opts.checkResponses ?? false,
    ...(opts.impactPageDeadlineMs === undefined ? {} : { impactPageDeadlineMs: opts.impactPageDeadlineMs }),
    webauthn,
    residency: { deploymentRegion: config.deploymentRegion, labelUnlabelled: false },
    // Issue 15 item 3: the docs page's security per operation, and the demo tenant's ids as its examples.
    routeAccess: edgeRouteAccess(),
    docExamples: demoDocExamples(demo),
  });
  const corePort = await listenOrExplain(core.server, config.corePort, 'CORE_PORT');
  life.cleanups.push(async () => {
    core.server.closeAllConnections();
    await new Promise((r) => core.server.close(r));
  });
  startBackgroundWork(opts, { db, keys, log, metrics }, life);

  // Issue 15 item 9: the first requests must not meet cold caches, pools or code. Core's pool
  // is warmed as the edge's is (edge/warm.ts): a connect timing out on a loaded machine is tried
  // again, not the end of the start (the database answered the migrations and the seed just now).
  const steps = new StartupSteps(log);
  life.cleanups.push(async () => steps.stop());
  try {
    await Promise.all([
      steps.run('core database pool', () => warmPool(db), databaseUnreachable),
      edge.warm(),
    ]);
  } catch (err) {
    throw new StartError(`warming up failed: ${(err as Error).message.split('\n')[0]}`);
  }
  const authzPort = await listenAuthz(edge, config.authzPort);
  const gatewayPorts = await startGateway(config, opts, { log, authzPort, corePort, webauthn }, life);
  return {
    ports: {
      gateway: gatewayPorts.gateway,
      core: corePort,
      authz: authzPort,
      ...(gatewayPorts.gatewayTls !== undefined ? { gatewayTls: gatewayPorts.gatewayTls } : {}),
    },
    embedded,
    db,
    demo,
  };
}

/** The configured database, else an embedded PostgreSQL under the data directory. */
async function databaseOf(
  config: Config,
  log: Logger,
  life: Lifetime,
): Promise<{ embedded: EmbeddedServer | undefined; databaseUrl: string }> {
  if (config.databaseUrl) return { embedded: undefined, databaseUrl: config.databaseUrl };
  const pgLog = log.child({ component: 'postgres' });
  const embedded = await startEmbedded({
    dir: join(config.dataDir, 'pg'),
    port: await freePort(),
    onLog: (m) => pgLog.debug(m.trim()),
  }).catch((err: unknown) => {
    throw new StartError((err as Error).message.split('\n')[0] ?? 'PostgreSQL could not start');
  });
  life.cleanups.push(() => embedded.stop());
  void embedded.exited.then(() => {
    if (!life.stopping) log.error('PostgreSQL stopped; /v1/ready answers 503 until it is back');
  });
  return { embedded, databaseUrl: embedded.url('postgres') };
}

/** Migrations, the cluster's region label and the ledger's currencies, before anything uses the database. */
async function prepareDatabase(config: Config, db: Db, log: Logger): Promise<void> {
  let databaseRegion: string;
  try {
    await migrate(db.pool);
    // Issue 20 item 2: the database records its own region (kept when already labelled).
    databaseRegion = await labelCluster(db, config.deploymentRegion, 'stack');
  } catch (err) {
    throw new StartError(`database migration failed: ${(err as Error).message.split('\n')[0]}`);
  }
  // The ledger's currencies (issue 21 item 2), before the seed opens accounts and core serves.
  await loadLedgerCurrencies(db);
  if (databaseRegion !== config.deploymentRegion)
    log.warn(
      { deploymentRegion: config.deploymentRegion, databaseRegion },
      "DEPLOYMENT_REGION differs from the region the database was labelled with; tenants are placed by the database's",
    );
}

/** The edge (authz service) with its own pool, sharing core's metrics registry in this one process. */
async function startEdge(
  config: Config,
  opts: StackOptions,
  s: {
    databaseUrl: string;
    metrics: ReturnType<typeof createMetrics>;
    log: Logger;
    masterKey: Buffer;
    edgeSecret: string;
  },
  life: Lifetime,
) {
  const { databaseUrl, metrics, log, masterKey, edgeSecret } = s;
  const edgeDb = createDb({ connectionString: databaseUrl, metrics, log });
  life.cleanups.push(() => edgeDb.close());
  const edge = await buildEdge({
    db: edgeDb,
    apiKeySealKey: deriveApiKeySealKey(masterKey),
    challengeKeys: [deriveChallengeKey(masterKey)],
    log: log.child({ component: 'edge' }),
    edgeSecret,
    databaseUrl,
    issuerUrl: config.issuerUrl,
    // Issue 15 item 6: one process, one registry: core's /v1/metrics includes the edge's metrics.
    registry: metrics.registry,
    ...(opts.publicRateLimit ? { publicRateLimit: opts.publicRateLimit } : {}),
    ...(opts.credentialGuessLimit ? { credentialGuessLimit: opts.credentialGuessLimit } : {}),
    // Tests that raise the gateway's deadline raise the edge's own budget with it.
    ...(opts.checkTimeoutMs ? { budgetMs: opts.checkTimeoutMs } : {}),
    ...(config.policyBundle ? { bundleSource: config.policyBundle } : {}),
    ...(config.decisionInputs.sample > 0
      ? { decisionInputs: { ...config.decisionInputs, key: deriveDecisionInputKey(masterKey) } }
      : {}),
  });
  life.cleanups.push(() => edge.stop());
  return edge;
}

/** Core loads and verifies bundles itself (simulate): it never reads the edge's memory. */
async function corePolicyStore(config: Config, log: Logger, life: Lifetime): Promise<PolicyStore> {
  const corePolicies = new PolicyStore(await loadTrustedKeys(), log.child({ component: 'core' }));
  const bundleSource = config.policyBundle ?? defaultBundleDir;
  await corePolicies.load(bundleSource);
  corePolicies.watch(bundleSource);
  life.cleanups.push(async () => corePolicies.stop());
  return corePolicies;
}

/** The webhook dispatcher, housekeeping and the lapsed payer sweep, each stopped before the pool closes. */
function startBackgroundWork(
  opts: StackOptions,
  s: { db: Db; keys: KeyStore; log: Logger; metrics: ReturnType<typeof createMetrics> },
  life: Lifetime,
): void {
  // Webhook dispatcher (issue 6): delivers outbox events; stopped (batch in flight awaited) before the pool closes.
  const dispatcher = new Dispatcher({
    db: s.db,
    keys: s.keys,
    log: s.log.child({ component: 'webhooks' }),
    allowPrivateTargets: opts.webhookAllowPrivateTargets ?? false,
    deadLettered: s.metrics.webhookDeadLettered,
  });
  dispatcher.start();
  life.cleanups.push(() => dispatcher.stop());
  // Housekeeping: one-time values and lockout counters are deleted once inert (core/housekeeping).
  const housekeeper = new Housekeeper(s.db, s.log.child({ component: 'housekeeping' }));
  housekeeper.start();
  life.cleanups.push(() => housekeeper.stop());
  // Issue 20 item 3: a payer tuple past its expires_at releases its delegate's pending transfers.
  const payerSweeper = new LapsedPayerSweeper(s.db, s.log.child({ component: 'payer-sweeper' }));
  payerSweeper.start();
  life.cleanups.push(() => payerSweeper.stop());
}

async function listenAuthz(edge: { listen(port: number): Promise<number> }, port: number): Promise<number> {
  try {
    return await edge.listen(port);
  } catch (err) {
    const inUse = /EADDRINUSE|address already in use|No address added/i.test((err as Error).message);
    throw new StartError(
      inUse
        ? `port ${port} (AUTHZ_PORT) is already in use`
        : `edge authz could not bind: ${(err as Error).message}`,
    );
  }
}

/** The dev gateway (Envoy's part) and, when asked, its mutual-TLS listener; up once it answers. */
async function startGateway(
  config: Config,
  opts: StackOptions,
  s: { log: Logger; authzPort: number; corePort: number; webauthn: { origins: string[] } },
  life: Lifetime,
): Promise<{ gateway: number; gatewayTls?: number }> {
  const gateway: Gateway = createGateway({
    log: s.log.child({ component: 'gateway' }),
    authzAddress: `127.0.0.1:${s.authzPort}`,
    coreOrigin: `http://127.0.0.1:${s.corePort}`,
    ...(opts.checkTimeoutMs ? { checkTimeoutMs: opts.checkTimeoutMs } : {}),
    ...(opts.gatewayTls ? { tls: opts.gatewayTls } : {}),
  });
  await gateway
    .ready()
    .catch(() => s.log.warn('edge channel not ready yet; the first requests may be denied'));
  const gatewayPort = await listenOrExplain(gateway.server, config.gatewayPort, 'GATEWAY_PORT');
  if (s.webauthn.origins.length === 0) s.webauthn.origins.push(`http://localhost:${gatewayPort}`);
  life.cleanups.push(() => gateway.close());
  await answering(`http://127.0.0.1:${gatewayPort}`);
  const gatewayTlsPort = gateway.tlsServer
    ? await listenOrExplain(gateway.tlsServer as unknown as Server, opts.gatewayTls?.port ?? 0, 'gateway TLS')
    : undefined;
  return { gateway: gatewayPort, ...(gatewayTlsPort !== undefined ? { gatewayTls: gatewayTlsPort } : {}) };
}
