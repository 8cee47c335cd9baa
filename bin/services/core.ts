/**
 * `npm run core`: one core instance (run N behind Envoy). Reads only its own configuration
 * (bin/service-config.ts), refuses to start on a database whose migrations are not all applied
 * (`npm run migrate` runs them, once per release), re-seals legacy API-key secrets, loads and
 * verifies policy bundles itself (simulate), and serves HTTP with /v1/health, /v1/ready and
 * /v1/metrics. Production: SMS through SMS_WEBHOOK_URL only, no demo data, no file written.
 * SIGTERM: stop accepting, finish requests in flight and the dispatcher's batch, exit within 10 s.
 */
import { resolve } from 'node:path';
import { ApiKeys } from '../../core/apikeys/store.ts';
import { buildCore } from '../../core/app.ts';
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { Dispatcher } from '../../core/admin/webhooks/dispatcher.ts';
import { TargetGuard } from '../../core/admin/webhooks/target.ts';
import { pendingMigrations } from '../../core/db/migrate.ts';
import { Housekeeper } from '../../core/housekeeping/prune.ts';
import { LapsedPayerSweeper } from '../../core/payments/lapsed-payers.ts';
import { fileInboxSender, type SmsSender } from '../../core/identity/sms.ts';
import { webhookSmsSender } from '../../core/identity/sms-webhook.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { defaultBundleDir } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { createDb, databaseUnreachable, type Db } from '../../shared/db/pool.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { reportNotReady, StartupSteps, startupPool } from '../../shared/startup.ts';
import { closeHttpGracefully, listen } from '../../shared/net.ts';
import { labelCluster } from '../../core/residency/cluster.ts';
import {
  deploymentRegion,
  listOf,
  secretKey,
  secretKeys,
  secretText,
  type ServiceConfig,
} from '../service-config.ts';
import { configOrExit, exitWhileStarting, fail, loggerOf, onShutdown, trustedSigners } from './common.ts';
import { edgeRouteAccess } from '../docs.ts';

type Log = ReturnType<typeof loggerOf>;

function smsSenderOf(config: ServiceConfig, guard: TargetGuard, log: Log): SmsSender {
  if (config.mode === 'development' && !config.values.SMS_WEBHOOK_URL)
    return fileInboxSender(resolve(config.values.DATA_DIR ?? './.data'));
  return webhookSmsSender({
    url: new URL(config.values.SMS_WEBHOOK_URL as string),
    secret: config.values.SMS_WEBHOOK_SECRET as string,
    guard,
    log: log.child({ component: 'sms' }),
  });
}

/**
 * The database, refused unless every migration is applied (`npm run migrate` runs them once per
 * release). Waited for while it does not answer (shared/startup.ts): exiting on one connect that
 * timed out left a core that was never ready. `startDb`, for the start-up steps only (closed once
 * they are done), destroys a connection whose statement goes unanswered: an attempt abandoned at
 * its deadline otherwise kept its connection waiting on a silent database for ever, one more each
 * attempt, until the pool held only those and the core could not start once the database answered.
 */
async function migratedDb(
  config: ServiceConfig,
  log: Log,
  metrics: ReturnType<typeof createMetrics>,
  steps: StartupSteps,
) {
  const databaseUrl =
    config.values.DATABASE_URL ??
    fail(
      'DATABASE_URL is required (npm start runs an embedded PostgreSQL; a separate core needs a server)',
      2,
    );
  const db = createDb({ connectionString: databaseUrl, metrics, log });
  const startDb = startupPool(db);
  const pending = await steps
    .run('the database', () => pendingMigrations(startDb), databaseUnreachable)
    .catch((err: unknown) => fail(`database unreachable: ${(err as Error).message}`));
  if (pending.length > 0)
    fail(
      `the database lacks ${pending.length} migration(s) (${pending[0]} first): run \`npm run migrate\` once for this release`,
    );
  return { db, startDb };
}

/** This deployment's region, warning when the database cluster is labelled with another. */
async function placedRegion(config: ServiceConfig, db: Db, log: Log, steps: StartupSteps): Promise<string> {
  // Issue 20 item 2: tenants are placed by the region the database records (`npm run migrate`
  // labels a new cluster; a cluster migrated before migration 0900 is labelled here, once).
  const region = deploymentRegion(config);
  const databaseRegion = await steps.run(
    'the database (cluster region)',
    () => labelCluster(db, region, 'core'),
    databaseUnreachable,
  );
  if (databaseRegion !== region)
    log.warn(
      { deploymentRegion: region, databaseRegion },
      "this core runs in another region than its database cluster; tenants are placed by the database's",
    );
  return region;
}

/** The key store; API-key secrets sealed before their own key existed are re-sealed with it. */
async function keyStore(
  config: ServiceConfig,
  dbs: { db: Db; startDb: Db },
  log: Log,
  steps: StartupSteps,
): Promise<KeyStore> {
  const { db, startDb } = dbs;
  const keys = new KeyStore(db, await secretKey(config, 'MASTER_KEY', 'master.key'), {
    apiKeySealKey: await secretKey(config, 'API_KEY_SEAL_KEY', 'api-key-seal.key'),
    challengeKeys: await secretKeys(config, 'CHALLENGE_KEY', 'challenge.key'),
    issuerUrl: config.values.ISSUER_URL,
  });
  const resealed = await steps.run(
    'the database (API-key secrets to re-seal)',
    () => new ApiKeys(startDb, keys).resealLegacySecrets(),
    databaseUnreachable,
  );
  if (resealed > 0) log.info({ resealed }, 'API-key secrets re-sealed with their own key');
  return keys;
}

/** The policy bundle, verified by core itself before it serves, then watched for new revisions. */
async function policyStore(config: ServiceConfig, log: Log): Promise<PolicyStore> {
  const policies = new PolicyStore(await trustedSigners(config), log);
  const bundleSource = config.values.POLICY_BUNDLE ?? defaultBundleDir;
  await policies
    .load(bundleSource)
    .catch((err: unknown) => fail(`policy bundle refused: ${(err as Error).message}`));
  policies.watch(bundleSource);
  return policies;
}

async function main(): Promise<void> {
  const config = configOrExit('core');
  const log = loggerOf(config, 'core');
  const dev = config.mode === 'development';
  const metrics = createMetrics();
  // Until it listens, a core waiting for its database says so at warn after a few seconds.
  const steps = new StartupSteps(log);
  const starting = exitWhileStarting(log);
  const stopReports = reportNotReady(log, 'core', () => steps.waiting());
  const { db, startDb } = await migratedDb(config, log, metrics, steps);
  const region = await placedRegion(config, startDb, log, steps);
  const keys = await keyStore(config, { db, startDb }, log, steps);
  const policies = await policyStore(config, log);

  const allowedCidrs = listOf(config, 'PRIVATE_TARGETS_ALLOWED');
  const guard = new TargetGuard({ allowPrivateTargets: dev, allowedCidrs });
  const sms = smsSenderOf(config, guard, log);
  // The ledger's currencies (issue 21 item 2) before the first request.
  await steps.run(
    'the database (ledger currencies)',
    () => loadLedgerCurrencies(startDb),
    databaseUnreachable,
  );
  // Its connections of abandoned attempts end at their query timeout, then the pool ends.
  void startDb.close().catch(() => undefined);
  const core = buildCore({
    db,
    log,
    metrics,
    build: readBuildInfo(),
    keys,
    policies,
    routeAccess: edgeRouteAccess(),
    // The current secret and, while it rotates, the previous one (issue 23 item 4).
    edgeSecrets: [
      await secretText(config, 'EDGE_SHARED_SECRET', 'edge-shared-secret.key'),
      ...listOf(config, 'EDGE_SHARED_SECRET_PREVIOUS'),
    ],
    identity: { sms },
    webhookAllowPrivateTargets: dev,
    webhookAllowedCidrs: allowedCidrs,
    checkResponses: config.values.RESPONSE_SCHEMA_CHECK === '1',
    residency: { deploymentRegion: region, labelUnlabelled: false },
    webauthn: {
      rpId: config.values.WEBAUTHN_RP_ID ?? 'localhost',
      rpName: 'Payments platform staff',
      origins: listOf(config, 'WEBAUTHN_ORIGINS'),
    },
    ...(dev ? { dataDir: resolve(config.values.DATA_DIR ?? './.data') } : {}),
  });
  const port = await listen(core.server, Number(config.values.CORE_PORT), config.values.CORE_HOST).catch(
    (err: unknown) =>
      fail(`cannot listen on CORE_PORT ${config.values.CORE_PORT}: ${(err as Error).message}`),
  );
  const dispatcher = new Dispatcher({
    db,
    keys,
    log: log.child({ component: 'webhooks' }),
    targets: guard,
    deadLettered: metrics.webhookDeadLettered,
  });
  dispatcher.start();
  const housekeeper = new Housekeeper(db, log.child({ component: 'housekeeping' }));
  housekeeper.start();
  // Issue 20 item 3: a payer tuple past its expires_at releases its delegate's pending transfers.
  const payerSweeper = new LapsedPayerSweeper(db, log.child({ component: 'payer-sweeper' }));
  payerSweeper.start();
  stopReports();
  log.info({ port, host: config.values.CORE_HOST }, 'core is serving');
  starting();

  onShutdown(log, async () => {
    // No new connections; requests in flight finish; kept-alive connections close after their answer.
    await closeHttpGracefully(core.server);
    await dispatcher.stop();
    housekeeper.stop();
    await payerSweeper.stop();
    policies.stop();
    if ('idle' in sms && typeof sms.idle === 'function') await (sms.idle as () => Promise<void>)();
    await guard.close();
    await db.close();
  });
}

main().catch((err: unknown) => fail(`core failed to start: ${(err as Error).message}`));
