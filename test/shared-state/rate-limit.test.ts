/**
 * Issue 23 item 6: two core instances on one database share one administration rate-limit
 * budget (SPEC 5.5): limit L across both, not 2L.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { buildCore } from '../../core/app.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, serve, type Res } from '../helpers/http.ts';

const edgeSecret = randomBytes(16).toString('hex');
const limits = { perSourcePerMinute: 6, perTenantPerMinute: 10 };
/** Both instances read one clock, mid-minute, so every request falls in one window. */
const fixedNow = Math.floor(Date.now() / 60_000) * 60_000 + 30_000;

describe('administration rate limits with two core instances', () => {
  let tdb: TestDb;
  const pools: Db[] = [];
  const cores: { origin: string; close(): Promise<void> }[] = [];
  before(async () => {
    tdb = await freshDatabase();
    for (const id of ['ta', 'tb'])
      await tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
    const master = randomBytes(32);
    for (let i = 0; i < 2; i++) {
      // Each instance has its own pool, keys and limiter: only the database is shared.
      const metrics = createMetrics();
      const db = createDb({ connectionString: tdb.url, metrics, log: createLogger('silent') });
      pools.push(db);
      const core = buildCore({
        db,
        log: createLogger('silent'),
        metrics,
        build: readBuildInfo(),
        keys: new KeyStore(db, master),
        edgeSecrets: [edgeSecret],
        now: () => fixedNow,
        adminRateLimits: limits,
      });
      cores.push(await serve(core.server));
    }
  });
  after(async () => {
    for (const c of cores) await c.close();
    for (const p of pools) await p.close();
    await tdb.drop();
  });

  const create = (core: number, tenant: string, ip: string): Promise<Res> =>
    call((cores[core] as { origin: string }).origin, 'POST', '/v1/products', {
      json: { code: `P${randomBytes(3).toString('hex').toUpperCase()}`, category: 'X' },
      headers: {
        'x-edge-auth': edgeSecret,
        'x-request-id': randomUUID(),
        'idempotency-key': `rl-${randomUUID()}`,
        'x-tenant-id': tenant,
        'x-principal-id': 'staff-admin',
        'x-roles': 'admin',
        'x-client-ip': ip,
      },
    });
  const statuses = (rs: Res[]) => rs.map((r) => r.status).sort();

  it('counts one address across both instances: L accepted in all, sequentially and at once', async () => {
    const seq: Res[] = [];
    for (let i = 0; i < limits.perSourcePerMinute + 2; i++) seq.push(await create(i % 2, 'ta', '10.1.0.1'));
    assert.deepEqual(
      seq.map((r) => r.status),
      [...Array(limits.perSourcePerMinute).fill(201), 429, 429],
      seq.map((r) => r.text).join('\n'),
    );
    const refused = seq.at(-1) as Res;
    assert.equal(refused.json?.code, 'RATE_LIMITED');
    assert.ok(Number(refused.headers['retry-after']) >= 1 && Number(refused.headers['retry-after']) <= 60);

    // Concurrent requests through both instances never count past the limit.
    const burst = await Promise.all(
      Array.from({ length: 3 * limits.perSourcePerMinute }, (_, i) => create(i % 2, 'tb', '10.1.0.2')),
    );
    const s = statuses(burst);
    assert.equal(s.filter((x) => x === 201).length, limits.perSourcePerMinute, s.join(','));
    assert.equal(s.filter((x) => x === 429).length, 2 * limits.perSourcePerMinute, s.join(','));
  });

  it('counts one tenant across addresses and instances; a refusal for the tenant does not spend the address', async () => {
    // ta spent 6 of its 10 in the test above: the 2 requests refused for their address did not count.
    const left = limits.perTenantPerMinute - limits.perSourcePerMinute;
    const rs: Res[] = [];
    for (let i = 0; i < left + 3; i++) rs.push(await create(i % 2, 'ta', `10.2.0.${i}`));
    assert.equal(rs.filter((r) => r.status === 201).length, left);
    assert.deepEqual(
      rs
        .slice(left)
        .map((r) => r.json?.detail ?? r.json?.message ?? r.text)
        .map((m: string) => /tenant/.test(m)),
      [true, true, true],
      rs
        .slice(left)
        .map((r) => r.text)
        .join('\n'),
    );
    // The three addresses refused for the tenant were given their slot back.
    const { rows } = await tdb.db.query<{ scope: string; count: number }>(
      `SELECT scope, count FROM admin_rate_counters WHERE scope = ANY($1::text[]) ORDER BY scope`,
      [rs.slice(left).map((_, i) => `ip:10.2.0.${left + i}`)],
    );
    assert.deepEqual(
      rows.map((r) => r.count),
      [0, 0, 0],
    );
    // Another tenant's budget is its own.
    assert.equal((await create(1, 'tb', '10.3.0.1')).status, 201);
  });
});
