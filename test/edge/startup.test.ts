/**
 * An edge started while PostgreSQL does not answer yet becomes ready as soon as it does, and says
 * meanwhile what it waits for. Faults are injected by a relay in front of the database: the LISTEN
 * client's first connect held past its 2 s timeout, every connection refused for a while, a pool
 * connection that authenticates and then never answers. Each of these made the edge process exit
 * (buildEdge or warm() rejected) or hang in its warm-up for ever, never ready.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { deriveApiKeySealKey, deriveChallengeKey } from '../../core/keys/keys.ts';
import { buildEdge, type Edge } from '../../edge/main.ts';
import { warmSteps } from '../../edge/warm.ts';
import { createOpsServer } from '../../edge/metrics.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { loggerInto } from '../helpers/log-lines.ts';
import { call, serve } from '../helpers/http.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';
import { waitFor } from '../helpers/process.ts';
import { sleep } from '../helpers/listening.ts';
import { within } from '../helpers/within.ts';

/** A liveness bound for the tests, far above what each start takes once the database answers. */
const capMs = 30_000;

// Each test has its own relay and edge: they wait side by side (each waits out timeouts).
describe('edge start-up while PostgreSQL is not answering', { concurrency: true }, () => {
  let tdb: TestDb;
  const relays: Relay[] = [];
  const edges: Edge[] = [];
  const dbs: Db[] = [];

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('st1', 'st1', 'KE', 'KES')`,
    );
  });
  after(async () => {
    await Promise.all(relays.map((r) => r.stop()));
    await Promise.all(edges.map((e) => e.stop()));
    await Promise.all(dbs.map((d) => d.close().catch(() => undefined)));
    await tdb.drop();
  });

  /**
   * An edge (its pool and LISTEN client) on PostgreSQL through `relay`, its log lines kept in
   * `lines`; with `password`, the database URL's password replaced.
   */
  async function edgeThrough(relay: Relay, lines: string[] = [], password?: string): Promise<Edge> {
    relays.push(relay);
    const url = new URL(await throughRelay(relay, tdb.url));
    if (password !== undefined) url.password = password;
    const log = loggerInto(lines);
    const db = createDb({ connectionString: url.toString(), metrics: createMetrics(), log });
    dbs.push(db);
    const masterKey = randomBytes(32);
    const edge = await buildEdge({
      db,
      log,
      apiKeySealKey: deriveApiKeySealKey(masterKey),
      challengeKeys: [deriveChallengeKey(masterKey)],
      edgeSecret: 'startup-test',
    });
    edges.push(edge);
    return edge;
  }

  it('waits out a first LISTEN connect that times out, then warms and serves', async () => {
    const relay = new Relay();
    // The first connection is the LISTEN client's: held past its 2 s connect timeout.
    relay.plan.push({ delayMs: 3_000 });
    const edge = await edgeThrough(relay);
    assert.equal(await within(edge.warm(), capMs), undefined, 'warmed');
    assert.ok(edge.serving(), 'serving once the listener answered');
    assert.deepEqual(edge.waiting(), []);
  });

  it('while every connection is refused it is not ready and says why; it is ready soon after they are accepted', async () => {
    const relay = new Relay();
    relay.refuse = true;
    const lines: string[] = [];
    const edge = await edgeThrough(relay, lines);
    const warming = edge.warm();
    const ops = await serve(createOpsServer(edge.metrics.registry, () => edge.serving(), edge.waiting));
    try {
      // Said once not ready for 5 s (shared/startup.ts notReadyQuietMs): awaited, not slept through.
      const warning = 'edge not ready: waiting for';
      await waitFor(() => (lines.some((l) => l.includes(warning)) ? true : undefined), capMs).catch(() =>
        assert.fail(`no warning: ${lines.join('')}`),
      );
      const ready = await call(ops.origin, 'GET', '/ready');
      assert.equal(ready.status, 503);
      assert.equal(ready.json.status, 'not ready');
      assert.ok(ready.json.waiting.includes('database listener'), ready.text);
      assert.ok(ready.json.waiting.includes('database pool'), ready.text);
      // Said at warn (seen at the default level, info), with the last error and never the URL.
      const warned = lines.find((l) => l.includes(warning));
      assert.ok(warned, lines.join(''));
      assert.match(warned, /"what":"database listener","lastError":"[^"]+"/);
      assert.equal(JSON.parse(warned).level, 40);
      assert.doesNotMatch(lines.join(''), /postgres(ql)?:\/\//);

      relay.refuse = false;
      const acceptedAt = Date.now();
      assert.equal(await within(warming, capMs), undefined, 'warmed once connections are accepted');
      assert.ok(Date.now() - acceptedAt < 10_000, `ready ${Date.now() - acceptedAt} ms after`);
      assert.ok(edge.serving());
      assert.equal((await call(ops.origin, 'GET', '/ready')).status, 200);
    } finally {
      await ops.close();
    }
  });

  it('does not wait for a database that refuses its password: warm-up fails with the refusal', async () => {
    const edge = await edgeThrough(new Relay(), [], 'not-the-password');
    const outcome = await within(
      edge.warm().then(
        () => 'warmed',
        (err: Error) => err.message,
      ),
      capMs,
    );
    assert.match(outcome, /password authentication failed/);
    assert.doesNotMatch(outcome, /not-the-password/);
  });

  it('a pool connection that authenticates and then never answers does not hold the warm-up', async () => {
    const relay = new Relay();
    // The LISTEN client's connection is relayed; the next one, the first of the pool's, falls silent.
    relay.plan.push({}, { silenceAtFirstQuery: true });
    const edge = await edgeThrough(relay);
    assert.equal(await within(edge.warm(), capMs), undefined, 'warmed');
    assert.ok(edge.serving());
    assert.equal(relay.silentCount(), 1, 'a connection fell silent');
    assert.equal(relay.silentHeldByEdge(), 0, 'the edge let it go');
  });

  it('a database silent during the state step: not serving meanwhile, no connection kept, ready once it answers', async () => {
    const relay = new Relay();
    const edge = await edgeThrough(relay);
    // The LISTEN client is connected and answering: the state is fresh, the policy loaded. Every
    // connection from now on falls silent at its first statement, the state step's among them.
    assert.ok(edge.state.isFresh());
    relay.silenceAtFirstQuery = true;
    const warming = edge.warm();
    // Past the start-up pool's query timeout (5 s): its first attempt failed, a second is under way.
    await sleep(6_000);
    assert.equal(edge.serving(), false, 'not serving before its warm-up is done');
    assert.ok(
      edge.waiting().some((w) => w.what === warmSteps.state),
      JSON.stringify(edge.waiting()),
    );
    // The database answers again before the 10 s attempt deadline would abandon a statement
    // that had no timeout (and leave its connection waiting on the silence for ever).
    relay.silenceAtFirstQuery = false;
    assert.equal(await within(warming, capMs), undefined, 'warmed once it answers');
    assert.ok(edge.serving());
    assert.ok(relay.silentCount() > 0, 'connections fell silent');
    // Every silenced statement had a deadline: no connection is left waiting on the silence.
    for (let i = 0; i < 50 && relay.silentHeldByEdge() > 0; i++) await sleep(100);
    assert.equal(relay.silentHeldByEdge(), 0, 'the edge let every silenced connection go');
  });
});
