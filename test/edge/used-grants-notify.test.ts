/**
 * NOTIFY `stepup_used` at the edge (edge/state/store.ts, migration 0870): each announces one use
 * of a request-bound step-up, sent at every transfer's commit (and any database session may send
 * one). It changes the used set only: it must not keep the edge from caching its other lookups
 * (sessions, tenants, ...), whose rows it changes nothing of. One it cannot read leaves the set
 * untrusted (lookups read the rows) until the next load, even when it arrives during a load.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { KeyStore } from '../../core/keys/keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { createLogger } from '../../shared/log.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { type NotifiedEdge, notifiedEdge, sessionReadsWhile } from '../helpers/edge-notify.ts';
import { listenVia, sleep, untilHolds } from '../helpers/listening.ts';

describe('an edge told of step-up uses by NOTIFY stepup_used', () => {
  let tdb: TestDb;
  let edge: NotifiedEdge;

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('su1', 'su1', 'KE', 'KES')`,
    );
    const keys = new KeyStore(tdb.db, randomBytes(32));
    edge = await notifiedEdge(tdb, new TokenVerifier(tdb.db), keys.apiKeySecrets);
  });
  after(async () => {
    await edge?.stop();
    await tdb?.drop();
  });

  it('keeps caching what it reads through a stream of step-up uses, and learns each use', async () => {
    const expiresAtMs = Date.now() + 600_000;
    // Sessions first looked up during the stream, as a busy tenant's transfers use their step-ups.
    const { reads, sent } = await sessionReadsWhile(edge, 'su1', (i) =>
      edge.sender.query(`SELECT pg_notify('stepup_used', $1)`, [
        JSON.stringify({ tenantId: 'su1', grantJti: `g${i}`, idempotencyKey: null, expiresAtMs }),
      ]),
    );
    assert.ok(sent > 100, `${sent} uses announced`);
    assert.equal(reads, 10, 'each session read once, then cached for its 30 s');
    const last = `g${sent - 1}`;
    for (let i = 0; i < 100 && (await edge.state.stepUpUse('su1', last)) === undefined; i++) await sleep(20);
    assert.equal(await edge.state.stepUpUse('su1', last), '', 'the last use announced is known');
  });

  it('stops trusting the set when a storm announces more uses than it keeps: a use no notification announced is read from its row', async () => {
    const expiresAtMs = Date.now() + 600_000;
    // One more than the set keeps (edge/state/store.ts maxCachedEntries), in one commit.
    await edge.sender.query(
      `SELECT pg_notify('stepup_used', json_build_object('tenantId', 'su1', 'grantJti', 'storm' || i,
         'idempotencyKey', NULL, 'expiresAtMs', $1::bigint)::text) FROM generate_series(0, 100000) i`,
      [expiresAtMs],
    );
    for (let i = 0; i < 250 && (await edge.state.stepUpUse('su1', 'storm100000')) === undefined; i++)
      await sleep(20);
    await edge.sender.query('SET session_replication_role = replica');
    await edge.sender.query(
      `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
       VALUES ('su1', 'unannounced', $1, $2, 'o', 'transfer.create', 'k-unannounced-1', now(), now() + interval '10 minutes')`,
      [randomUUID(), randomUUID()],
    );
    await edge.sender.query('SET session_replication_role = origin');
    assert.equal(await edge.state.stepUpUse('su1', 'unannounced'), 'k-unannounced-1');
  });
  it("keeps a use while its token is still accepted: through expiry plus the verifier's clock tolerance", async () => {
    // A step-up token is accepted up to tokenClockToleranceS past its exp: its use must be known
    // that long, whether loaded at connect or announced.
    await tdb.db.query(
      `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
       VALUES ('su1', 'just-expired', $1, $2, 'o', 'transfer', 'k-1', now() - interval '1 minute', now() - interval '2 seconds')`,
      [randomUUID(), randomUUID()],
    );
    const keys = new KeyStore(tdb.db, randomBytes(32));
    const fresh = await notifiedEdge(tdb, new TokenVerifier(tdb.db), keys.apiKeySecrets);
    try {
      assert.equal(await fresh.state.stepUpUse('su1', 'just-expired'), 'k-1', 'loaded at connect');
      const expiresAtMs = Date.now() - 2_000;
      await fresh.sender.query(`SELECT pg_notify('stepup_used', $1)`, [
        JSON.stringify({
          tenantId: 'su1',
          grantJti: 'announced-expired',
          idempotencyKey: 'k-2',
          expiresAtMs,
        }),
      ]);
      for (let i = 0; i < 100 && (await fresh.state.stepUpUse('su1', 'announced-expired')) === undefined; i++)
        await sleep(20);
      assert.equal(await fresh.state.stepUpUse('su1', 'announced-expired'), 'k-2', 'announced');
      // The prune (every entryTtlMs) keeps it too: run it now.
      (fresh.state as unknown as { pruneUsedGrants(): void }).pruneUsedGrants();
      assert.equal(await fresh.state.stepUpUse('su1', 'announced-expired'), 'k-2', 'after a prune');
    } finally {
      await fresh.stop();
    }
  });
});

describe('the used step-ups an edge loads when its listener connects', () => {
  let tdb: TestDb;
  let state: EdgeState | undefined;
  const clients: pg.Client[] = [];
  const client = async () => {
    const c = new pg.Client({ connectionString: tdb.url });
    clients.push(c);
    await c.connect();
    return c;
  };

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('su2', 'su2', 'KE', 'KES')`,
    );
  });
  after(async () => {
    await state?.stop();
    for (const c of clients) await c.end().catch(() => undefined);
    await tdb.drop();
  });

  it('are not trusted when a stepup_used it cannot read arrives during the load: a use is then read from its row', async () => {
    const url = new URL(tdb.url);
    url.searchParams.set('application_name', 'edge-used-load');
    const keys = new KeyStore(tdb.db, randomBytes(32));
    state = new EdgeState(
      listenVia(tdb.db, url.toString()),
      new TokenVerifier(tdb.db),
      keys.apiKeySecrets,
      createLogger('silent'),
    );
    // The listener's load of the used set waits on this lock, after its LISTEN.
    const locker = await client();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE stepup_uses IN ACCESS EXCLUSIVE MODE');
    const starting = state.start();
    let waiting = false;
    const loadWaits = async () => {
      const { rows } = await tdb.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'edge-used-load' AND wait_event_type = 'Lock'`,
      );
      waiting = rows[0]?.n === 1;
    };
    for (const end = Date.now() + 4_000; !waiting && Date.now() < end; await sleep(20)) await loadWaits();
    assert.ok(waiting, 'the load waits on the lock');
    // Delivered to the listener as its load ends, before the load's answer.
    await locker.query(`SELECT pg_notify('stepup_used', 'not a use')`);
    await locker.query('COMMIT');
    await starting;
    await untilHolds(() => state?.isFresh() === true, 5_000, 'the listener');

    // A use the edge is told of by no notification it reads (as the one above may have been).
    const quiet = await client();
    await quiet.query(`SET session_replication_role = replica`);
    await quiet.query(
      `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
       VALUES ('su2', 'unheard', $1, $2, 'o', 'transfer.create', 'k-unheard-0001', now(), now() + interval '10 minutes')`,
      [randomUUID(), randomUUID()],
    );
    assert.equal(await state.stepUpUse('su2', 'unheard'), 'k-unheard-0001');
  });
});
