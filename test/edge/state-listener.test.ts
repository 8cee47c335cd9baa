/**
 * The edge's LISTEN client (edge/state/store.ts): the heartbeat reconnects it every second after
 * a loss, and a connect may take up to its 2 s timeout. One attempt at a time: a slow reconnect
 * must not leave a second client connected and forgotten (one database connection leaked per
 * slow reconnect, for the life of the process).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

/** A TCP relay to PostgreSQL that can hold each new connection before relaying it, and counts them. */
class SlowRelay {
  delayMs = 0;
  readonly open = new Set<Socket>();
  private server: Server | undefined;

  async start(target: { host: string; port: number }): Promise<number> {
    this.server = createServer((inbound) => {
      this.open.add(inbound);
      inbound.on('close', () => this.open.delete(inbound));
      inbound.on('error', () => inbound.destroy());
      setTimeout(() => {
        if (inbound.destroyed) return;
        const outbound = connect(target.port, target.host);
        outbound.on('error', () => inbound.destroy());
        inbound.on('close', () => outbound.destroy());
        outbound.on('close', () => inbound.destroy());
        inbound.pipe(outbound).pipe(inbound);
      }, this.delayMs);
    });
    await new Promise<void>((r) => this.server?.listen(0, '127.0.0.1', r));
    const address = this.server.address();
    if (!address || typeof address === 'string') throw new Error('relay has no port');
    return address.port;
  }

  async stop(): Promise<void> {
    for (const s of this.open) s.destroy();
    await new Promise((r) => this.server?.close(r));
  }
}

describe('edge state listener reconnects', () => {
  let tdb: TestDb;
  let state: EdgeState;
  const relay = new SlowRelay();

  const listenerBackends = async () =>
    (
      await tdb.db.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND (query LIKE 'LISTEN %' OR query = 'SELECT 1')`,
      )
    ).rows.map((r) => r.pid);

  before(async () => {
    tdb = await freshDatabase();
    const url = new URL((tdb.db.pool.options as { connectionString: string }).connectionString);
    const port = await relay.start({ host: url.hostname, port: Number(url.port) });
    url.hostname = '127.0.0.1';
    url.port = String(port);
    // The listener connects through the relay; every other query goes straight to the database.
    const db: Db = {
      ...tdb.db,
      pool: { ...tdb.db.pool, options: { connectionString: url.toString() } } as Db['pool'],
    };
    const keys = new KeyStore(tdb.db, randomBytes(32));
    state = new EdgeState(db, new TokenVerifier(tdb.db), keys.apiKeySecrets, createLogger('silent'));
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
    await new Promise((r) => setTimeout(r, 4_500));
    assert.equal(relay.open.size, 1, 'one listener connection after the reconnect');
    for (let i = 0; i < 50 && (await listenerBackends()).length !== 1; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal((await listenerBackends()).length, 1, 'one listening backend');
  });
});
