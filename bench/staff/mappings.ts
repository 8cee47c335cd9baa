/**
 * Group-mapping change benchmark (issue 16): how long `PUT /v1/staff/group-mappings` takes when
 * the mapping it removes gave a role to `n` federated members, each taken and audited
 * (staff.role_remove) in the PUT's transaction, and how many SQL statements it sends. Prints,
 * never asserts.
 *   npx tsx bench/staff/mappings.ts [members=2000,10000] [rounds=2]
 * Starts its own embedded PostgreSQL in a temporary directory and a core on loopback, and calls
 * the route as the edge forwards it (identity headers with the edge's shared secret), so the
 * figure is core's whole answer: the gateway's 30 s route timeout applies to it in front.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { request } from 'undici';
import { buildCore } from '../../core/app.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics, type Metrics } from '../../shared/metrics.ts';
import { listen } from '../../shared/net.ts';
import { runBench, withDatabase } from '../lib/harness.ts';
import { showingLoad } from '../lib/probe.ts';

const sizes = (process.argv[2] ?? '2000,10000').split(',').map(Number);
const rounds = Number(process.argv[3] ?? 2);
const tenant = 'bench';
const path = '/v1/staff/group-mappings';
const edgeSecret = randomBytes(32).toString('base64url');

/** The service Admin's PUT, as the edge forwards it to core. */
async function put(origin: string, items: { idp_group: string; role: string }[]) {
  const res = await request(`${origin}${path}`, {
    method: 'PUT',
    headers: {
      'content-type': 'application/json',
      'x-edge-auth': edgeSecret,
      'x-request-id': randomUUID(),
      'x-tenant-id': tenant,
      'x-principal-id': `service-token:${randomUUID()}`,
      'x-roles': 'admin',
      'x-client-ip': '10.0.0.1',
    },
    body: JSON.stringify({ items }),
    headersTimeout: 600_000,
    bodyTimeout: 600_000,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`PUT answered ${res.statusCode}: ${text}`);
}

/** `n` members whose last sign-in's group `bulk` gave them Ops. */
async function members(db: Db, n: number): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO staff_users (tenant_id, id, user_name, idp_groups, idp_roles)
     SELECT $1, gen_random_uuid(), 'bulk-' || gen_random_uuid() || '@bench.example', '{bulk}', '{ops}'
     FROM generate_series(1, $2) RETURNING id`,
    [tenant, n],
  );
  const ids = rows.map((r) => r.id);
  await db.query(
    `INSERT INTO staff_user_roles (tenant_id, user_id, role) SELECT $1, unnest($2::uuid[]), 'ops'`,
    [tenant, ids],
  );
  return ids;
}

/** Statements sent so far (the pool's query histogram counts every one). */
async function statements(metrics: Metrics): Promise<number> {
  const { values } = await metrics.dbDuration.get();
  return values.filter((v) => v.metricName?.endsWith('_count')).reduce((sum, v) => sum + v.value, 0);
}

/** One PUT taking Ops from `n` members: its time, its statements and the records it left. */
async function round(origin: string, db: Db, metrics: Metrics, n: number): Promise<string> {
  await put(origin, [{ idp_group: 'bulk', role: 'ops' }]);
  const ids = await members(db, n);
  const sent = await statements(metrics);
  const t0 = performance.now();
  await put(origin, []);
  const ms = performance.now() - t0;
  const count = (await statements(metrics)) - sent;
  const { rows } = await db.query<{ left: string; audited: string }>(
    `SELECT (SELECT count(*) FROM staff_user_roles WHERE tenant_id = $1 AND user_id = ANY($2::uuid[])) AS left,
            (SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'staff.role_remove'
               AND target->>'id' = ANY($2::text[])) AS audited`,
    [tenant, ids],
  );
  const r = rows[0];
  return `${n} members: ${(ms / 1000).toFixed(2)} s, ${count} statements, roles left ${r?.left}, records ${r?.audited}`;
}

async function main(): Promise<void> {
  await withDatabase('mappings', async (_db, _dir, url) => {
    const metrics = createMetrics();
    const db = createDb({ connectionString: url, metrics, log: createLogger('silent'), max: 10 });
    try {
      await db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, 'Bench', 'KE', 'KES')`,
        [tenant],
      );
      const core = buildCore({
        db,
        log: createLogger('silent'),
        metrics,
        build: readBuildInfo(),
        keys: new KeyStore(db, randomBytes(32)),
        edgeSecrets: [edgeSecret],
        adminRateLimits: { perSourcePerMinute: 10_000, perTenantPerMinute: 10_000 },
      });
      const origin = `http://127.0.0.1:${await listen(core.server, 0)}`;
      try {
        await showingLoad(async () => {
          for (const n of sizes)
            for (let i = 0; i < rounds; i++) process.stdout.write(`${await round(origin, db, metrics, n)}\n`);
        });
      } finally {
        core.server.close();
      }
    } finally {
      await db.close();
    }
  });
}

runBench(main);
