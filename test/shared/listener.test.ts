/**
 * The LISTEN connection of core caches (shared/db/listener.ts) on a database that goes away in
 * each way it can: a backend terminated (pg_terminate_backend, as an operator or a restart does),
 * and a connection that falls silent once it listens (a peer gone without a FIN, a hung server:
 * nothing is closed, nothing answers), which only a heartbeat can notice. Real PostgreSQL; the
 * silence is test/helpers/pg-relay.ts's.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import { Listener, listenerConnectMs } from '../../shared/db/listener.ts';
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
});
