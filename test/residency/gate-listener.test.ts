/**
 * The residency gate (core/residency/gate.ts) caches the cluster's region and tenants' placements
 * only while its LISTEN connection (shared/db/listener.ts) is up, and drops them on NOTIFY
 * `tenants_changed`. Here that connection is terminated (pg_terminate_backend, as a restart does)
 * and, apart, falls silent once it listens (test/helpers/pg-relay.ts): either way a relabel of the
 * cluster must reach the gate, which then refuses a tenant that may not live there.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { labelCluster } from '../../core/residency/cluster.ts';
import { ResidencyGate, type Asker } from '../../core/residency/gate.ts';
import { listenerConnectMs, listenerHeartbeatMs } from '../../shared/db/listener.ts';
import type { Db } from '../../shared/db/pool.ts';
import { asAppError } from '../../shared/errors.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { listenVia, sleep, untilHolds } from '../helpers/listening.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';

const asker: Asker = { principalId: 'staff:t', method: 'GET', route: '/v1/tenants/{id}', requestId: 'r' };

describe("the residency gate's listener on a database that goes away", () => {
  let tdb: TestDb;
  const cleanups: (() => Promise<void>)[] = [];
  /** The gates' clock: moved on past their 5 s reconnect spacing instead of waiting it out. */
  let clock = Date.now();

  const gate = (db: Db) => {
    const g = new ResidencyGate(
      db,
      createLogger('silent'),
      createMetrics(),
      { deploymentRegion: 'KE', labelUnlabelled: true },
      () => clock,
    );
    // Bounded: a close that waits on a silent peer must not hang the suite (test/shared/listener.test.ts).
    cleanups.push(() => Promise.race([g.close(), sleep(listenerConnectMs + 1_000)]));
    return g;
  };
  /** 'served' or the code it is refused with. */
  const answer = (g: ResidencyGate) =>
    g.check(['kenya-only'], asker).then(
      () => 'served',
      (err: unknown) => asAppError(err).code,
    );
  /** The gate's answer once it is `want`, or the last one after `capMs`. */
  const answerWithin = async (g: ResidencyGate, want: string, capMs: number) => {
    const end = Date.now() + capMs;
    let last = await answer(g);
    while (last !== want && Date.now() < end) {
      await sleep(50);
      last = await answer(g);
    }
    return last;
  };
  const relabel = (region: string) => tdb.db.query('UPDATE cluster_identity SET region = $1', [region]);

  before(async () => {
    tdb = await freshDatabase();
    await labelCluster(tdb.db, 'KE', 'test');
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency, security)
       VALUES ('kenya-only', 'K', 'KE', 'KES', '{"resident_regions": ["KE"]}')`,
    );
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    await relabel('KE');
  });
  after(async () => {
    await tdb.drop();
  });

  it('after its backend is terminated, reads placements per request, listens again and is told of a relabel', async () => {
    const g = gate(tdb.db);
    assert.equal(await answer(g), 'served');
    await untilHolds(() => g.listening, 5_000, 'the listener');
    assert.equal(await answer(g), 'served', 'cached from here on');

    await tdb.db.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    await untilHolds(() => !g.listening, 5_000, 'the listener lost');
    await relabel('UG');
    assert.equal(await answer(g), 'TENANT_NOT_RESIDENT', 'nothing cached while nobody listens');
    await relabel('KE');
    assert.equal(await answer(g), 'served');

    clock += 5_000;
    assert.equal(await answer(g), 'served');
    await untilHolds(() => g.listening, 5_000, 'the listener back');
    assert.equal(await answer(g), 'served');
    await relabel('UG');
    assert.equal(
      await answerWithin(g, 'TENANT_NOT_RESIDENT', 5_000),
      'TENANT_NOT_RESIDENT',
      'the relabel announced to the new listener',
    );
  });

  it('gives up a listener that fell silent and sees a relabel nobody could announce to it', async () => {
    const relay = new Relay();
    cleanups.push(() => relay.stop());
    const g = gate(listenVia(tdb.db, await throughRelay(relay, tdb.url)));
    assert.equal(await answer(g), 'served');
    await untilHolds(() => g.listening, 5_000, 'the listener');
    assert.equal(await answer(g), 'served', 'the region is cached from here on');

    relay.silenceAll();
    await relabel('UG');
    // Its heartbeat finds the silence; until then the region cached before it is all it has.
    const bound = listenerHeartbeatMs + listenerConnectMs + 2_000;
    assert.equal(
      await answerWithin(g, 'TENANT_NOT_RESIDENT', bound),
      'TENANT_NOT_RESIDENT',
      `refused within ${bound} ms of the relabel`,
    );
  });
});
