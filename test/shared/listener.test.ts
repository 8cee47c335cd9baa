/**
 * The LISTEN connection of core caches (shared/db/listener.ts) on a database that goes away in
 * each way it can: a backend terminated (pg_terminate_backend, as an operator or a restart does),
 * and a connection that falls silent once it listens (a peer gone without a FIN, a hung server:
 * nothing is closed, nothing answers), which only a heartbeat can notice. Real PostgreSQL; the
 * silence is test/helpers/pg-relay.ts's. Then what the edge's state (edge/state/store.ts) asks of
 * it beside: keep() reconnecting on its own, each heartbeat's answer told, a `prepare` step on the
 * new connection after its LISTEN and within `readyMs`, and close() ending an attempt under way.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import { Listener, type ListenerHooks, listenerConnectMs } from '../../shared/db/listener.ts';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { listenVia, sleep, untilHolds } from '../helpers/listening.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';

const channel = 'listener_test';
/** Heartbeats in these tests: a silent connection is lost within this plus listenerConnectMs. */
const heartbeatMs = 200;

describe('the LISTEN connection of core caches', () => {
  let tdb: TestDb;
  const cleanups: (() => Promise<void>)[] = [];

  /** A listener on `db` that records what it is told, kept connected as its owners keep it. */
  function listener(db: Db) {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const seen = { payloads: [] as string[], listening: 0, lost: 0, lines };
    const l = new Listener(
      db,
      createLogger('info', sink),
      { name: 'test listener', whileDown: 'nothing', channels: [channel], reconnectEveryMs: 50, heartbeatMs },
      {
        onNotify: (_c, p) => seen.payloads.push(p),
        onListening: () => seen.listening++,
        onLost: () => seen.lost++,
      },
    );
    const keep = setInterval(() => l.ensure(), 50);
    cleanups.push(async () => {
      clearInterval(keep);
      // Bounded: a close that waits on a silent peer is the next test's finding, not this one's hang.
      await Promise.race([l.close(), sleep(listenerConnectMs + 1_000)]);
    });
    return { l, seen };
  }
  const notify = (payload: string) => tdb.db.query('SELECT pg_notify($1, $2)', [channel, payload]);

  before(async () => {
    tdb = await freshDatabase();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  after(async () => {
    await tdb.drop();
  });

  it('gives up a connection that falls silent once it listens, and listens again on one that answers', async () => {
    const relay = new Relay();
    cleanups.push(() => relay.stop());
    const { l, seen } = listener(listenVia(tdb.db, await throughRelay(relay, tdb.url)));
    await untilHolds(() => l.listening, 5_000, 'the listener');
    await notify('before');
    await untilHolds(() => seen.payloads.includes('before'), 5_000, 'a notification');

    relay.silenceAll();
    await notify('unheard');
    // Nothing is closed and nothing answers: only its heartbeat can tell.
    await untilHolds(
      () => seen.lost === 1,
      heartbeatMs + listenerConnectMs + 2_000,
      'the silent listener lost',
    );
    assert.ok(
      seen.lines.some((x) => x.includes('test listener lost') && x.includes('no answer to a heartbeat')),
      seen.lines.join('\n'),
    );
    await untilHolds(() => l.listening, 5_000, 'a new listener');
    assert.equal(seen.listening, 2, 'its owner is told it listens again (and reloads what it missed)');
    await notify('after');
    await untilHolds(() => seen.payloads.includes('after'), 5_000, 'a notification on the new connection');
    assert.equal(relay.silentHeldByEdge(), 0, 'the silent connection was let go');
  });

  it('closes within its deadline on a connection that fell silent', async () => {
    const relay = new Relay();
    cleanups.push(() => relay.stop());
    const db = listenVia(tdb.db, await throughRelay(relay, tdb.url));
    const l = new Listener(
      db,
      createLogger('silent'),
      { name: 'test listener', whileDown: 'nothing', channels: [channel], reconnectEveryMs: 50 },
      { onNotify: () => undefined, onListening: () => undefined, onLost: () => undefined },
    );
    l.ensure();
    await untilHolds(() => l.listening, 5_000, 'the listener');
    relay.silenceAll();
    const started = Date.now();
    // Its goodbye goes unanswered: the socket is destroyed instead of waited on for ever.
    await Promise.race([
      l.close(),
      sleep(listenerConnectMs + 3_000).then(() => assert.fail('close() still waits on the silent peer')),
    ]);
    assert.ok(Date.now() - started <= listenerConnectMs + 3_000);
    assert.equal(relay.silentHeldByEdge(), 0);
  });

  it('listens again after its backend is terminated (pg_terminate_backend), and is told of changes again', async () => {
    const { l, seen } = listener(tdb.db);
    await untilHolds(() => l.listening, 5_000, 'the listener');
    // Every other backend of the database, the listener's among them, as a restart ends them.
    const ended = await tdb.db.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    assert.ok((ended.rows[0]?.n ?? 0) >= 1, 'the listening backend was terminated');
    await untilHolds(() => seen.lost === 1, 5_000, 'the listener lost');
    await untilHolds(() => l.listening, 5_000, 'the listener back');
    assert.equal(seen.listening, 2);
    await notify('again');
    await untilHolds(() => seen.payloads.includes('again'), 5_000, 'a notification after the restart');
  });

  /** What a listener with every hook told (keep()'s tests), and the listener. */
  function kept(db: Db, opts: { readyMs?: number; prepare?: ListenerHooks['prepare'] } = {}) {
    const seen = {
      payloads: [] as string[],
      events: [] as string[],
      answered: 0,
      failed: [] as string[],
    };
    const l = new Listener(
      db,
      createLogger('silent'),
      {
        name: 'kept listener',
        whileDown: 'nothing',
        channels: [channel],
        reconnectEveryMs: 100,
        heartbeatMs,
        ...(opts.readyMs === undefined ? {} : { readyMs: opts.readyMs }),
      },
      {
        onNotify: (_c, p) => seen.payloads.push(p),
        onListening: () => seen.events.push('listening'),
        onLost: (why) => seen.events.push(`lost: ${why}`),
        onAnswered: () => seen.answered++,
        onAttemptFailed: (why) => seen.failed.push(why),
        ...(opts.prepare ? { prepare: opts.prepare } : {}),
      },
    );
    cleanups.push(() => Promise.race([l.close(), sleep(listenerConnectMs + 1_000)]));
    return { l, seen };
  }

  it('keep() listens before it resolves, tells each heartbeat answered, and listens again on its own after a loss', async () => {
    const url = new URL(tdb.url);
    url.searchParams.set('application_name', 'kept-listener');
    const { l, seen } = kept(listenVia(tdb.db, url.toString()));
    await l.keep();
    assert.ok(l.listening, 'listening once the first attempt settled');
    await untilHolds(() => seen.answered >= 2, heartbeatMs * 2 + 2_000, 'two heartbeats answered');
    const ended = await tdb.db.query<{ n: number }>(
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = 'kept-listener'`,
    );
    assert.equal(ended.rows[0]?.n, 1, 'the listening backend was terminated');
    await untilHolds(() => seen.events.length === 3, 5_000, 'lost, then listening again, with no ensure()');
    assert.equal(seen.events[0], 'listening');
    assert.match(seen.events[1] ?? '', /^lost: .*terminat/);
    assert.equal(seen.events[2], 'listening');
    await notify('kept');
    await untilHolds(() => seen.payloads.includes('kept'), 5_000, 'a notification on the new connection');
  });

  it('runs prepare on the new connection after its LISTEN and before it counts as listening, within readyMs', async () => {
    const order: string[] = [];
    let seenDuringPrepare: readonly string[] = [];
    const { l, seen } = kept(tdb.db, {
      // Longer than listenerConnectMs, the default deadline of the LISTENs.
      readyMs: listenerConnectMs + 3_000,
      prepare: async (client) => {
        order.push(`prepare (listening: ${l.listening})`);
        // Announced while prepare reads: delivered, since the connection already LISTENs.
        await notify('during prepare');
        await client.query(`SELECT pg_sleep(${(listenerConnectMs + 500) / 1000})`);
        seenDuringPrepare = [...seen.events];
      },
    });
    await l.keep();
    assert.ok(l.listening);
    assert.deepEqual(order, ['prepare (listening: false)']);
    assert.deepEqual(seenDuringPrepare, [], 'not listening before prepare is done');
    assert.deepEqual(seen.events, ['listening']);
    await untilHolds(
      () => seen.payloads.includes('during prepare'),
      5_000,
      'the notification sent during prepare',
    );
  });

  it('gives up an attempt whose prepare fails, tells why, and tries again', async () => {
    let calls = 0;
    const { l, seen } = kept(tdb.db, {
      prepare: async () => {
        calls++;
        if (calls === 1) throw new Error('prepare refused');
      },
    });
    await l.keep();
    assert.equal(l.listening, false);
    assert.deepEqual(seen.failed, ['prepare refused']);
    await untilHolds(() => l.listening, 5_000, 'a later attempt listening');
    assert.equal(calls, 2);
    assert.deepEqual(seen.events, ['listening']);
  });

  it('close() during an attempt that hangs at its LISTEN ends that attempt and returns, telling no failure', async () => {
    const relay = new Relay();
    cleanups.push(() => relay.stop());
    relay.silenceAtFirstQuery = true;
    const { l, seen } = kept(listenVia(tdb.db, await throughRelay(relay, tdb.url)));
    void l.keep();
    await untilHolds(() => relay.silentCount() === 1, 5_000, 'an attempt silent at its LISTEN');
    const started = Date.now();
    await Promise.race([
      l.close(),
      sleep(listenerConnectMs + 3_000).then(() => assert.fail('close() still waits on the attempt')),
    ]);
    assert.ok(Date.now() - started < listenerConnectMs, `closed in ${Date.now() - started} ms`);
    assert.equal(relay.heldByEdge(), 0, "the attempt's connection is ended when close() returns");
    assert.deepEqual(seen.failed, [], 'an attempt ended by close() is no failure');
    assert.equal(l.listening, false);
    await sleep(300);
    assert.equal(relay.accepted, 1, 'no attempt after close()');
  });
});
