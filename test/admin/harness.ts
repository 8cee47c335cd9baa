/** A core on a fresh, seeded database and admin-call helpers sending identity headers as the edge does (with its secret). */
import { randomBytes, randomUUID } from 'node:crypto';
import { buildCore } from '../../core/app.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { seedDemo } from '../../core/seed.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, serve, type Res } from '../helpers/http.ts';
import { staffViaEdge, testEdgeSecrets } from '../helpers/edge-auth.ts';

export interface AdminHarness {
  tdb: TestDb;
  keys: KeyStore;
  origin: string;
  as(
    role: string,
    tenant?: string,
  ): (
    method: string,
    path: string,
    opts?: { json?: unknown; headers?: Record<string, string> },
  ) => Promise<Res>;
  close(): Promise<void>;
}

export async function startAdmin(
  opts: {
    perSourcePerMinute?: number;
    seed?: boolean;
    allowPrivateWebhookTargets?: boolean;
    webhookAllowedCidrs?: string[];
  } = {},
): Promise<AdminHarness> {
  const metrics = createMetrics();
  const tdb = await freshDatabase({ metrics });
  // The ledger seed remembers per process which tenants it prepared, so only one harness per file seeds.
  if (opts.seed !== false) await seedDemo(tdb.db);
  else
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('demo', 'Demo', 'KE', 'KES')`,
    );
  await tdb.db.query(
    `INSERT INTO tenants (id, name, country, base_currency) VALUES ('other', 'Other', 'KE', 'KES')`,
  );
  // The demo tenant's Admins are the platform admins (only they create tenants).
  await tdb.db.query(`INSERT INTO platform_operator (tenant_id) VALUES ('demo') ON CONFLICT DO NOTHING`);
  const keys = new KeyStore(tdb.db, randomBytes(32));
  const core = buildCore({
    db: tdb.db,
    log: createLogger('silent'),
    metrics,
    build: readBuildInfo(),
    keys,
    edgeSecrets: testEdgeSecrets,
    checkResponses: true,
    adminRateLimits: { perSourcePerMinute: opts.perSourcePerMinute ?? 10_000, perTenantPerMinute: 10_000 },
    webhookAllowPrivateTargets: opts.allowPrivateWebhookTargets ?? false,
    webhookAllowedCidrs: opts.webhookAllowedCidrs ?? [],
  });
  const s = await serve(core.server);
  return {
    tdb,
    keys,
    origin: s.origin,
    as:
      (role, tenant = 'demo') =>
      (method, path, o = {}) =>
        call(s.origin, method, path, {
          ...(o.json !== undefined ? { json: o.json } : {}),
          headers: staffViaEdge(role, tenant, o.headers),
        }),
    async close() {
      await s.close();
      await tdb.drop();
    },
  };
}

/**
 * An Admin's writes and a core client's ledger writes, each with an Idempotency-Key of its own
 * (prefixed `prefix`): what the currency race and storm tests send. `harness` and `token` are read
 * at each call (tests set them in `before`).
 */
export function freshlyKeyed(harness: () => AdminHarness, token: () => string, prefix: string) {
  return {
    admin: (method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
      harness().as('admin')(method, path, {
        ...(json === undefined ? {} : { json }),
        headers: { 'idempotency-key': `${prefix}-${randomUUID()}`, ...headers },
      }),
    ledger: (path: string, json: unknown): Promise<Res> =>
      call(harness().origin, 'POST', path, {
        json,
        headers: {
          authorization: `Bearer ${token()}`,
          'x-request-id': randomUUID(),
          'idempotency-key': `${prefix}-${randomUUID()}`,
        },
      }),
  };
}
