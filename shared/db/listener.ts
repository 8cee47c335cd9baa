/**
 * A LISTEN connection that restarts itself, for a core cache told of changes by NOTIFY
 * (shared/notify.ts): one client of its own outside the pool, listening on the owner's channels.
 * Each notification goes to `onNotify`. When the connection is lost, `onLost` runs (the owner
 * stops trusting what NOTIFY kept current) and the next `ensure()` opens another, at most every
 * `reconnectEveryMs`; once that one listens, `onListening` runs, since anything may have changed
 * while nobody listened. `ensure()` only starts an attempt: it never makes its caller wait.
 *
 * The edge keeps its own (edge/state/store.ts): it adds a heartbeat and a staleness bound that
 * fails decisions closed, which no core cache needs.
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
  now?: () => number;
}

/** How long one attempt may take to connect (pg's connectionTimeoutMillis), and then to LISTEN. */
export const listenerConnectMs = 2_000;

export class Listener {
  private client: pg.Client | undefined;
  private connecting = false;
  private lastAttempt = Number.NEGATIVE_INFINITY;
  private closed = false;
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
    const lost = (err?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      this.log.warn({ err: err?.message }, `${this.opts.name} lost; ${this.opts.whileDown} until it is back`);
      this.hooks.onLost();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (n) => this.hooks.onNotify(n.channel, n.payload ?? ''));
    void this.connect(client).finally(() => {
      this.connecting = false;
    });
  }

  private async connect(client: pg.Client): Promise<void> {
    try {
      await client.connect();
      // A peer that went silent after the connect would hold the attempt (and every later one) for ever.
      const silent = setTimeout(() => client.connection.stream.destroy(), listenerConnectMs);
      try {
        for (const channel of this.opts.channels) await client.query(`LISTEN ${channel}`);
      } finally {
        clearTimeout(silent);
      }
      if (this.closed) {
        void client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      this.hooks.onListening();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, `${this.opts.name} could not connect`);
      void client.end().catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
