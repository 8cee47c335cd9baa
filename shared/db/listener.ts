/**
 * A LISTEN connection that restarts itself, for a core cache told of changes by NOTIFY
 * (shared/notify.ts): one client of its own outside the pool, listening on the owner's channels.
 * Each notification goes to `onNotify`. When the connection is lost, `onLost` runs (the owner
 * stops trusting what NOTIFY kept current) and the next `ensure()` opens another, at most every
 * `reconnectEveryMs`; once that one listens, `onListening` runs, since anything may have changed
 * while nobody listened. `ensure()` only starts an attempt: it never makes its caller wait.
 *
 * A listening connection is asked to answer (`SELECT 1`) every `heartbeatMs`: one that fell silent
 * (a peer gone without a FIN, a hung server, a middlebox that drops the flow) delivers no NOTIFY
 * and says nothing, and a connection that only listens never writes, so nothing else would ever
 * notice. One that does not answer within `listenerConnectMs` is lost like a closed one.
 *
 * The edge keeps its own (edge/state/store.ts): it adds a staleness bound that fails decisions
 * closed, which no core cache needs.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import type { Db } from './pool.ts';

/** What the owner does when the connection listens, is told of a change, or is lost. */
export interface ListenerHooks {
  onNotify(channel: string, payload: string): void;
  /** Runs once the connection listens (again): reload or drop what may have changed meanwhile. */
  onListening(): void;
  onLost(): void;
}

export interface ListenerOptions {
  /** What its log lines call it, e.g. `residency listener`. */
  name: string;
  /** What the owner does without it, said when it is lost (`placements are read per request`). */
  whileDown: string;
  channels: readonly string[];
  /** Attempts to connect are at least this far apart. */
  reconnectEveryMs: number;
  /** How often a listening connection must answer; default `listenerHeartbeatMs`. */
  heartbeatMs?: number;
  now?: () => number;
}

/**
 * How long one attempt may take to connect (pg's connectionTimeoutMillis), then to LISTEN; how
 * long a heartbeat, and a goodbye (`end`), may go unanswered.
 */
export const listenerConnectMs = 2_000;
/** A listening connection answers a heartbeat this often (a silent one is lost within this plus listenerConnectMs). */
export const listenerHeartbeatMs = 5_000;

/**
 * `work` on `client`, its socket destroyed when it has not settled within `ms` (which rejects
 * it: pg fails a query whose connection ends). Ending gracefully would wait on the silent peer.
 * The edge's listener (edge/state/store.ts) bounds its queries with it too.
 */
export async function within<T>(client: pg.Client, ms: number, work: Promise<T>): Promise<T> {
  const timer = setTimeout(() => client.connection.stream.destroy(), ms);
  try {
    return await work;
  } finally {
    clearTimeout(timer);
  }
}

/** End `client` with a goodbye, its socket destroyed if that goes unanswered (a silent peer never closes). */
function endClient(client: pg.Client): Promise<void> {
  return within(client, listenerConnectMs, client.end()).catch(() => undefined);
}

export class Listener {
  private client: pg.Client | undefined;
  private connecting = false;
  private lastAttempt = Number.NEGATIVE_INFINITY;
  private closed = false;
  private heartbeat: NodeJS.Timeout | undefined;
  /** A heartbeat is waiting for its answer (the next one waits its turn, never queues behind it). */
  private beating = false;
  private readonly now: () => number;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly opts: ListenerOptions,
    private readonly hooks: ListenerHooks,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** Whether the connection is up and listening. */
  get listening(): boolean {
    return this.client !== undefined;
  }

  /** Start (or restart, at most every `reconnectEveryMs`) the connection; returns at once. */
  ensure(): void {
    if (
      this.closed ||
      this.client ||
      this.connecting ||
      this.now() - this.lastAttempt < this.opts.reconnectEveryMs
    )
      return;
    this.connecting = true;
    this.lastAttempt = this.now();
    const client = new pg.Client({
      connectionString: (this.db.pool.options as { connectionString?: string }).connectionString,
      connectionTimeoutMillis: listenerConnectMs,
    });
    client.on('error', (err) => this.lose(client, err.message));
    client.on('end', () => this.lose(client));
    client.on('notification', (n) => this.hooks.onNotify(n.channel, n.payload ?? ''));
    void this.connect(client).finally(() => {
      this.connecting = false;
    });
  }

  private async connect(client: pg.Client): Promise<void> {
    try {
      await client.connect();
      // A peer that went silent after the connect would hold the attempt (and every later one) for ever.
      await within(
        client,
        listenerConnectMs,
        (async () => {
          for (const channel of this.opts.channels) await client.query(`LISTEN ${channel}`);
        })(),
      );
      if (this.closed) {
        void endClient(client);
        return;
      }
      this.client = client;
      this.heartbeat = setInterval(
        () => void this.beat(client),
        this.opts.heartbeatMs ?? listenerHeartbeatMs,
      );
      this.heartbeat.unref();
      this.hooks.onListening();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, `${this.opts.name} could not connect`);
      void endClient(client);
    }
  }

  /** Ask the listening connection to answer; one that does not in time is lost. */
  private async beat(client: pg.Client): Promise<void> {
    if (this.beating) return;
    this.beating = true;
    const timer = setTimeout(() => {
      this.lose(client, `no answer to a heartbeat within ${listenerConnectMs} ms`);
    }, listenerConnectMs);
    try {
      await client.query('SELECT 1');
    } catch (err) {
      this.lose(client, (err as Error).message);
    } finally {
      clearTimeout(timer);
      this.beating = false;
    }
  }

  /** `client` is no longer the listener (when it still was): the owner is told, and it is ended. */
  private lose(client: pg.Client, why?: string): void {
    if (this.client !== client) return;
    this.client = undefined;
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    this.log.warn({ err: why }, `${this.opts.name} lost; ${this.opts.whileDown} until it is back`);
    this.hooks.onLost();
    void endClient(client);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    const client = this.client;
    this.client = undefined;
    if (client) await endClient(client);
  }
}
