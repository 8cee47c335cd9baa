/**
 * Rotate a tenant's token signing key (SPEC 3: the old key stays `grace` for at most 24 h).
 *   npx tsx bin/rotate-keys.ts <tenantId> [graceSeconds=3600]
 * Uses DATABASE_URL when set, else the development database of `npm start` must be running
 * with DATABASE_URL pointing at it. The master key comes from MASTER_KEY or DATA_DIR/master.key.
 */
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { appendAudit } from '../shared/audit.ts';
import { createDb } from '../shared/db/pool.ts';
import { loadOrCreateMasterKey } from '../shared/sealing.ts';
import { KeyStore, maxGraceS } from '../core/keys/keys.ts';
import { createLogger } from '../shared/log.ts';
import { createMetrics } from '../shared/metrics.ts';
import { loadConfig } from './config.ts';

async function main(): Promise<void> {
  const [tenantId, graceArg] = process.argv.slice(2);
  if (!tenantId) throw new Error('usage: tsx bin/rotate-keys.ts <tenantId> [graceSeconds]');
  const graceS = graceArg === undefined ? 3600 : Number(graceArg);
  if (!Number.isInteger(graceS) || graceS < 0 || graceS > maxGraceS)
    throw new Error(`graceSeconds must be an integer in 0..${maxGraceS}`);
  const config = loadConfig();
  if (!config.databaseUrl) throw new Error('set DATABASE_URL to the database whose keys to rotate');
  const log = createLogger('silent');
  const db = createDb({ connectionString: config.databaseUrl, metrics: createMetrics(), log });
  try {
    const keys = new KeyStore(
      db,
      await loadOrCreateMasterKey(config.masterKey, join(config.dataDir, 'master.key')),
    );
    // The rotation and its audit record commit together, as through POST /v1/admin/rotate-keys.
    const { kid, previous } = await db.tx(async (client) => {
      const r = await keys.rotateIn(client, tenantId, graceS);
      await appendAudit(client, [
        {
          tenantId,
          actor: { type: 'operator', id: userInfo().username },
          action: 'keys.rotate',
          target: { type: 'signing_key', id: r.kid },
          attrs: {
            previous: r.previous ?? null,
            graceSeconds: graceS,
            ...(r.retired.length ? { retired: r.retired } : {}),
            via: 'bin/rotate-keys.ts',
          },
        },
      ]);
      return r;
    });
    process.stdout.write(
      `${JSON.stringify({ tenantId, active: kid, grace: previous ?? null, graceSeconds: graceS })}\n`,
    );
  } finally {
    await db.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`error: ${(err as Error).message}\n`);
  process.exit(1);
});
