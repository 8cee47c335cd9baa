/**
 * Issue 15 item 9: no refusals after "up". The banner appears only once the stack answers
 * through the gateway, with the edge's caches, policy and database pools warm, so the first
 * requests are not refused 503 `authz_unavailable`; readiness says the edge is warm.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';
import { startProcess, waitFor, type Started } from '../helpers/process.ts';

/** Issue 15 item 9: "a burst of authenticated requests (e.g. 50 concurrent)". */
const burst = 50;

/**
 * The burst meets the real 100 ms deadline (SPEC 8) only with CPU to spare: the whole dev stack
 * is one Node thread, and on an overcommitted machine it fails closed however warm it is. Seen on
 * 2 cores: at a load average of ~5, 0, 0 and 5 of 50 refused; at ~12, 0 or 3 (50 of 50 before
 * the warm-up); at 20 to 45, 10 to 50, as many as once the stack had served for minutes. Past 2
 * runnable tasks per CPU this test says so and is skipped; test/edge/warm.test.ts checks the
 * warm-up itself without depending on the clock.
 */
const [load = 0] = loadavg();
const skipBurst =
  load > 2 * availableParallelism()
    ? `machine overcommitted (load average ${load.toFixed(1)} on ${availableParallelism()} CPUs): a 100 ms deadline says nothing about warmth here`
    : false;

describe('npm start reports up only when warm', () => {
  let tdb: TestDb;
  let dataDir: string;
  let p: Started;
  let gw: string;
  let connectionsAtBanner: number;
  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'warm-'));
    // The real 100 ms Check deadline (SPEC 8): nothing here raises it.
    p = startProcess({
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
    });
    gw = await waitFor(
      () => /gateway \(point clients here\): (http:\/\/127\.0\.0\.1:\d+)/.exec(p.output().stdout)?.[1],
      90_000,
    ).catch(() => assert.fail(`no banner: ${p.output().stderr}`));
    const { rows } = await tdb.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
      [tdb.name],
    );
    connectionsAtBanner = rows[0]?.n ?? 0;
  });
  after(async () => {
    p.child.kill('SIGTERM');
    await p.exited;
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('answers the first requests, a burst of authenticated ones right after the banner, without a 503', {
    skip: skipBurst,
  }, async () => {
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: { readOnly: { token: string } };
    };
    const headers = { authorization: `Bearer ${demo.serviceTokens.readOnly.token}` };
    const answers = await Promise.all(
      Array.from({ length: burst }, () => call(gw, 'GET', '/v1/countries', { headers })),
    );
    const refused = answers.map((a) => a.status).filter((s) => s !== 200);
    assert.equal(
      refused.length,
      0,
      `${refused.length} of ${burst} refused (${refused.join(',')}): ${answers.find((a) => a.status !== 200)?.text ?? ''}`,
    );
  });

  it('had both database pools open at the banner, and /v1/ready says the edge is warm', async () => {
    // Core's pool and the edge's, 10 connections each (shared/db/pool.ts), opened before "up".
    assert.ok(connectionsAtBanner >= 20, `connections open at the banner: ${connectionsAtBanner}`);
    const ready = await call(gw, 'GET', '/v1/ready');
    assert.equal(ready.status, 200, ready.text);
    assert.deepEqual(ready.json, { status: 'ready', checks: { database: 'ok', edge: 'warm' } });
  });
});
