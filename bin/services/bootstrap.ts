/**
 * `npm run bootstrap`: run once against a migrated database. Creates the platform operator's
 * tenant (BOOTSTRAP_TENANT_ID, _NAME, _COUNTRY, _CURRENCY) and its first Admin as a staff member
 * (BOOTSTRAP_ADMIN_USER_NAME), and prints, once, that person's one-time passkey enrolment link
 * (24 hours; the page at the first WEBAUTHN_ORIGINS) and an Admin service token for machine
 * set-up that expires after 24 hours (both stored only as hashes). A second run changes nothing
 * and prints no credential.
 */
import { loadLedgerCurrencies } from '../../core/admin/reference/currencies.ts';
import { pendingMigrations } from '../../core/db/migrate.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { AlreadyBootstrapped, bootstrapPlatform } from '../../core/platform/operator.ts';
import { createDb } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { listOf, secretKey } from '../service-config.ts';
import { configOrExit, fail, loggerOf } from './common.ts';

async function main(): Promise<void> {
  const config = configOrExit('bootstrap');
  const log = loggerOf(config, 'bootstrap');
  const databaseUrl = config.values.DATABASE_URL ?? fail('DATABASE_URL is required', 2);
  const country =
    config.values.BOOTSTRAP_COUNTRY ?? fail('BOOTSTRAP_COUNTRY is required (ISO 3166 alpha-2)', 2);
  const currency = config.values.BOOTSTRAP_CURRENCY ?? fail('BOOTSTRAP_CURRENCY is required (ISO 4217)', 2);
  const db = createDb({ connectionString: databaseUrl, metrics: createMetrics(), log, max: 1 });
  try {
    const pending = await pendingMigrations(db);
    if (pending.length > 0)
      fail(`the database lacks ${pending.length} migration(s): run \`npm run migrate\` first`);
    // The ledger's currencies (issue 21 item 2): the operator's tenant is checked against them.
    await loadLedgerCurrencies(db);
    const tenantId = config.values.BOOTSTRAP_TENANT_ID as string;
    const adminUserName = config.values.BOOTSTRAP_ADMIN_USER_NAME as string;
    const result = await db.tx((q) =>
      bootstrapPlatform(q, {
        tenantId,
        name: config.values.BOOTSTRAP_TENANT_NAME as string,
        country,
        currency,
        adminUserName,
      }),
    );
    const site = listOf(config, 'WEBAUTHN_ORIGINS')[0] ?? '';
    // The tenant's first token-signing key, so its staff and clients can be issued tokens.
    await new KeyStore(db, await secretKey(config, 'MASTER_KEY', 'master.key')).ensureActive(tenantId);
    process.stdout.write(
      [
        `platform bootstrapped: operator tenant ${tenantId}`,
        `first platform Admin: ${result.admin.userName} (staff member ${result.admin.userId})`,
        `  register their passkey (one-time link, shown once, expires ${result.admin.link.expiresAt}):`,
        `  ${site}${result.admin.link.path}`,
        `  (path ${result.admin.link.path.split('#')[0]}, tenant ${tenantId}, token ${result.admin.link.token})`,
        `machine set-up credential, an Admin service token (shown once, expires ${result.expiresAt.toISOString()}):`,
        `  Authorization: Bearer ${result.token}`,
        '',
      ].join('\n'),
    );
  } catch (err) {
    if (err instanceof AlreadyBootstrapped)
      fail('the platform is already bootstrapped; nothing was changed and no credential is printed', 1);
    if (err instanceof AppError) fail(err.message, 2);
    throw err;
  } finally {
    await db.close();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => fail(`bootstrap failed: ${(err as Error).message.split('\n')[0]}`),
);
