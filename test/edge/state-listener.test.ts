/**
 * The edge's LISTEN client (edge/state/store.ts): the heartbeat reconnects it every second after
 * a loss, and a connect may take up to its 2 s timeout. One attempt at a time: a slow reconnect
 * must not leave a second client connected and forgotten (one database connection leaked per
 * slow reconnect, for the life of the process). A connection that goes silent (a peer gone
 * without a word: failover, a dropped NAT entry) must not hold the edge: its heartbeat or its
 * connect is given up and another is opened, and stop() never waits on one. The connection is
 * shared/db/listener.ts's, as every core cache's; the edge keeps its staleness bound from it.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Logger } from 'pino';
import type { Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { loggerInto } from '../helpers/log-lines.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';
import { within } from '../helpers/within.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Poll `check` until it holds or `capMs` passes; returns whether it held (a liveness bound, not a timing claim). */
async function eventually(check: () => boolean | Promise<boolean>, capMs: number): Promise<boolean> {
  for (const end = Date.now() + capMs; Date.now() < end; await sleep(100)) if (await check()) return true;
  return check();
}

/** An EdgeState whose listener connects through `relay`; every other query goes straight to the database. */
async function stateThrough(
  tdb: TestDb,
  relay: Relay,
  name: string,
  log: Logger = createLogger('silent'),
): Promise<EdgeState> {
  const url = new URL(await throughRelay(relay, tdb.url));
  url.searchParams.set('application_name', name);
  const db: Db = {
    ...tdb.db,
    pool: { ...tdb.db.pool, options: { connectionString: url.toString() } } as Db['pool'],
  };
  const keys = new KeyStore(tdb.db, randomBytes(32));
  return new EdgeState(db, new TokenVerifier(tdb.db), keys.apiKeySecrets, log);
}

/** Backends of the listener of the EdgeState named `name` (its connections' application_name). */
async function listenerBackends(tdb: TestDb, name: string): Promise<number> {
  const { rows } = await tdb.db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1',
    [name],
  );
  return rows[0]?.n ?? 0;
}

describe('edge state listener reconnects', () => {
  let tdb: TestDb;
  let state: EdgeState;
  const relay = new Relay();

  before(async () => {
    tdb = await freshDatabase();
    state = await stateThrough(tdb, relay, 'edge-listener');
    await state.start();
  });
  after(async () => {
    await state.stop();
    await relay.stop();
    await tdb.drop();
  });

  it('a reconnect slower than the heartbeat opens one client, not one per heartbeat', async () => {
    assert.equal(relay.open.size, 1, 'one listener connection at start');
    // Every reconnect now takes 1.6 s: the heartbeat (every second) fires again meanwhile.
    relay.delayMs = 1_600;
    for (const s of relay.open) s.destroy();
    // Long enough for three heartbeats to find no listener while the first reconnect is slow.
    await sleep(4_500);
    assert.equal(relay.open.size, 1, 'one listener connection after the reconnect');
    assert.ok(
      await eventually(async () => (await listenerBackends(tdb, 'edge-listener')) === 1, 5_000),
      'one listening backend',
    );
  });
});

// Each test has its own relay, listener and session: they wait side by side (each waits out timeouts).
describe('edge state listener on a network that goes silent', { concurrency: true }, () => {
  let tdb: TestDb;
  const relays: Relay[] = [];
  const states: EdgeState[] = [];

  const started = async (log?: Logger): Promise<{ relay: Relay; state: EdgeState; name: string }> => {
    const relay = new Relay();
    relays.push(relay);
    const name = `edge-listener-${relays.length}`;
    const state = await stateThrough(tdb, relay, name, log);
    states.push(state);
    await state.start();
    assert.ok(state.isFresh(), 'fresh once started');
    return { relay, state, name };
  };

  before(async () => {
    tdb = await freshDatabase();
  });
  after(async () => {
    // Relays first: a stop() that waits on a silent connection is released by the relay's close.
    await Promise.all(relays.map((r) => r.stop()));
    await Promise.all(states.map((s) => s.stop()));
    await tdb.drop();
  });

  /** A live session, read once so that the edge caches it; `revoke()` revokes its row. */
  const cachedSession = async (state: EdgeState) => {
    const tenant = `tl${randomBytes(3).toString('hex')}`;
    const sid = randomUUID();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
      [tenant],
    );
    await tdb.db.query(
      `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, created_at, last_seen) VALUES ($1, $2, 'customer', 'c1', 'j', 1, now(), now())`,
      [sid, tenant],
    );
    assert.equal((await state.session(tenant, sid))?.revoked, false, 'cached as live');
    return {
      revoke: () => tdb.db.query('UPDATE sessions SET revoked_at = now() WHERE id = $1', [sid]),
      /** Served as a live session (false when refused as revoked, or stale: every decision is a deny then). */
      servedLive: async () => {
        try {
          return (await state.session(tenant, sid))?.revoked === false;
        } catch {
          return false;
        }
      },
      /** Refused as revoked; false while the state is stale too (every decision is a deny then). */
      refused: async () => {
        try {
          return (await state.session(tenant, sid))?.revoked === true;
        } catch {
          return false;
        }
      },
    };
  };

  it('refuses a session revoked while the listener was silent, then replaces the listener and is fresh again', async () => {
    const { relay, state, name } = await started();
    const session = await cachedSession(state);
    relay.silenceAll();
    // The NOTIFY of this revocation never reaches the edge.
    await session.revoke();
    assert.ok(await eventually(session.refused, 20_000), 'the revoked session is refused');
    assert.ok(
      await eventually(() => state.isFresh(), 20_000),
      'a new listener connection is opened while the old one stays silent',
    );
    assert.ok(await eventually(() => relay.heldByEdge() === 1, 5_000), 'the silent connection is let go');
    assert.ok(
      await eventually(async () => (await listenerBackends(tdb, name)) === 1, 5_000),
      'one listening backend',
    );
  });

  it('gives up a reconnect that falls silent after authenticating, and reconnects once the network heals', async () => {
    const { relay, state } = await started();
    relay.silenceAtFirstQuery = true;
    relay.cutAll();
    assert.ok(
      await eventually(() => relay.silentCount() > 0, 10_000),
      'a reconnect hangs at its first LISTEN',
    );
    assert.ok(await eventually(() => !state.isFresh(), 15_000), 'no listener: the cache goes stale');
    relay.silenceAtFirstQuery = false;
    assert.ok(await eventually(() => state.isFresh(), 20_000), 'a later reconnect succeeds');
    assert.ok(await eventually(() => relay.heldByEdge() === 1, 5_000), 'the hung attempt is let go');
  });

  it('stop() during a connect that never answers returns and leaves no connection open', async () => {
    const { relay, state, name } = await started();
    relay.silenceAtFirstQuery = true;
    relay.cutAll();
    assert.ok(
      await eventually(() => relay.silentCount() > 0, 10_000),
      'a reconnect hangs at its first LISTEN',
    );
    const stopped = (await within(state.stop(), 15_000)) !== 'overdue';
    assert.ok(stopped, 'stop() returned');
    assert.equal(relay.heldByEdge(), 0, 'no listener connection left open by the edge');
    assert.ok(
      await eventually(async () => (await listenerBackends(tdb, name)) === 0, 5_000),
      'no listening backend',
    );
  });

  it('stop() while a connect is still being answered returns and leaves no connection open', async () => {
    const { relay, state, name } = await started();
    relay.delayMs = 1_500;
    const before = relay.accepted;
    relay.cutAll();
    // The heartbeat's reconnect is held at the relay, before PostgreSQL has seen it.
    assert.ok(await eventually(() => relay.accepted > before, 5_000), 'a reconnect under way');
    const stopped = (await within(state.stop(), 15_000)) !== 'overdue';
    assert.ok(stopped, 'stop() returned');
    assert.ok(
      await eventually(() => relay.heldByEdge() === 0, 5_000),
      'no listener connection left open by the edge',
    );
    assert.ok(
      await eventually(async () => (await listenerBackends(tdb, name)) === 0, 5_000),
      'no listening backend',
    );
  });

  it('stop() with a silent listener returns and closes it', async () => {
    const { relay, state } = await started();
    relay.silenceAll();
    const stopped = (await within(state.stop(), 15_000)) !== 'overdue';
    assert.ok(stopped, 'stop() returned');
    assert.equal(relay.heldByEdge(), 0, 'the silent connection is closed');
  });

  it('refuses a session revoked while the listener was down, and repeated cuts leak nothing', async () => {
    const { relay, state, name } = await started();
    const session = await cachedSession(state);
    relay.delayMs = 1_600;
    relay.cutAll();
    // The NOTIFY of this revocation reaches no listener.
    await session.revoke();
    assert.ok(
      await eventually(session.refused, 15_000),
      'the revoked session is refused after the reconnect',
    );
    for (let i = 0; i < 3; i++) {
      relay.cutAll();
      await sleep(700);
    }
    relay.delayMs = 0;
    assert.ok(
      await eventually(() => state.isFresh() && relay.heldByEdge() === 1, 15_000),
      'one listener again',
    );
    assert.ok(
      await eventually(async () => (await listenerBackends(tdb, name)) === 1, 5_000),
      'one listening backend',
    );
  });

  it('does not serve a revoked session from a listener that answers every query but hears no notification', async () => {
    const { relay, state } = await started();
    const session = await cachedSession(state);
    // Its replacement answers LISTEN and every heartbeat, and hears none of what it listens for.
    relay.dropNotifications = true;
    relay.cutAll();
    await sleep(2_500);
    // Read (and cached as live) when the replacement counts as listening; denied when stale.
    await session.servedLive();
    await session.revoke();
    assert.ok(
      await eventually(async () => !(await session.servedLive()), 10_000),
      'the revoked session is no longer served as live past the staleness bound',
    );
    assert.ok(!state.isFresh(), 'a listener that hears nothing keeps the state stale');
  });

  it('says at warn, once, that a silent listener is lost and why, and is fresh again on its replacement', async () => {
    const lines: string[] = [];
    const { relay, state } = await started(loggerInto(lines));
    relay.silenceAll();
    const lost = () => lines.filter((l) => l.includes('edge state listener lost'));
    assert.ok(await eventually(() => lost().length > 0, 10_000), lines.join(''));
    const line = JSON.parse(lost()[0] as string) as { level: number; err: string; msg: string };
    assert.equal(line.level, 40, 'at warn');
    assert.match(line.err, /no answer to a heartbeat/);
    assert.match(line.msg, /serving cache within the staleness bound/);
    assert.ok(await eventually(() => relay.heldByEdge() === 1 && relay.open.size === 2, 5_000), 'replaced');
    assert.ok(await eventually(() => state.isFresh(), 10_000), 'fresh again');
    assert.equal(state.listenerError(), undefined);
    assert.equal(lost().length, 1, 'one loss, said once');
  });
});
