/**
 * A LISTEN connection that restarts itself, for a cache told of changes by NOTIFY
 * (shared/notify.ts): one client of its own outside the pool, listening on the owner's channels.
 * Each notification goes to `onNotify`. When the connection is lost, `onLost` runs (the owner
 * stops trusting what NOTIFY kept current) and the next `ensure()` opens another, at most every
 * `reconnectEveryMs`; once that one listens, `onListening` runs, since anything may have changed
 * while nobody listened. `ensure()` only starts an attempt: it never makes its caller wait.
 * `keep()` does that now and every `reconnectEveryMs` until close() (the caller may await the
 * first attempt).
 *
 * A listening connection is asked to answer every `heartbeatMs`: one that fell silent (a peer gone
 * without a FIN, a hung server, a middlebox that drops the flow) delivers no NOTIFY and says
 * nothing, and a connection that only listens never writes, so nothing else would ever notice. The
 * question is a NOTIFY on a channel of this listener's own, and the answer is hearing it back: a
 * connection that answers queries but hears nothing it LISTENs for (a pooler in transaction mode
 * runs the LISTEN on one server connection and the next query on another) is not listening. A
 * new connection is asked once before it counts as listening. One that does not answer within
 * `listenerConnectMs` is lost like a closed one. Each answer is told to `onAnswered`: until the
 * next one is due, nothing announced was missed.
 *
 * The edge's state (edge/state/store.ts) is an owner too: from `onListening` and `onAnswered` it
 * keeps the time the database last answered, and fails its decisions closed past a staleness
 * bound; in `prepare` it loads, on the new connection, what it keeps from notifications alone.
 *
 * Guarantees: one attempt at a time, each connect, LISTEN and `prepare` bounded (`within`); a
 * client that is not (or no longer) the listener never takes its place; close() ends the
 * connection and any attempt under way, and returns once their clients are ended.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import type { Db, Queryable } from './pool.ts';

/** What the owner does when the connection listens, is told of a change, or is lost. */
export interface ListenerHooks {
  onNotify(channel: string, payload: string): void;
  /** Runs once the connection listens (again): reload or drop what may have changed meanwhile. */
  onListening(): void;
  /** The listening connection is lost (closed, failed, or silent past a heartbeat's deadline), and why. */
  onLost(why: string): void;
  /**
   * Runs on a new connection once it LISTENs, before it counts as listening (within `readyMs` of
   * the connect, with the LISTENs): what must be read after LISTEN so that nothing announced is
   * missed. A failure gives the attempt up.
   */
  prepare?(client: Queryable): Promise<void>;
  /** The listening connection answered a heartbeat. */
  onAnswered?(): void;
  /** An attempt failed before the connection listened, and why (not called once close() began). */
  onAttemptFailed?(why: string): void;
}

export interface ListenerOptions {
  /** What its log lines call it, e.g. `residency listener`. */
  name: string;
  /** What the owner does without it, said when it is lost (`placements are read per request`). */
  whileDown: string;
  channels: readonly string[];
  /** Attempts to connect are at least this far apart (`keep()`: this often while not listening). */
  reconnectEveryMs: number;
  /** How often a listening connection must answer; default `listenerHeartbeatMs`. */
  heartbeatMs?: number;
  /** How long the LISTENs and `prepare` may take once connected; default `listenerConnectMs`. */
  readyMs?: number;
  /**
   * The level a failed attempt is logged at; default warn. The edge says debug: it retries every
   * second and says itself what it waits for (shared/startup.ts reportNotReady).
   */
  attemptLogLevel?: 'warn' | 'debug';
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

/** A channel no other listener has: where a listener's heartbeats come back to it (63 bytes at most). */
const heartbeatChannel = (): string => `listener_heartbeat_${process.pid}_${randomBytes(8).toString('hex')}`;

export class Listener {
  private client: pg.Client | undefined;
  /** This listener's own channel, on which it asks each heartbeat (never told to the owner). */
  private readonly echoChannel = heartbeatChannel();
  /** Heartbeats asked so far: each one's payload, so that only its own answer counts. */
  private asked = 0;
  /** The last heartbeat payload each client heard back. */
  private readonly heard = new WeakMap<pg.Client, string>();
  /** The attempt under way: one at a time (a second would open a client the first then overwrites and leaks). */
  private attempt: Promise<void> | undefined;
  /**
   * The attempt's client once connected, while it LISTENs and prepares: close() ends it rather than
   * wait for its deadline. Not while it connects: pg never settles a connect() whose client was
   * ended meanwhile (its connectionTimeoutMillis bounds that phase instead).
   */
  private readying: pg.Client | undefined;
  private lastAttempt = Number.NEGATIVE_INFINITY;
  private closed = false;
  private heartbeat: NodeJS.Timeout | undefined;
  /** keep()'s timer: a new attempt every `reconnectEveryMs` while not listening. */
  private keeper: NodeJS.Timeout | undefined;
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
    if (this.now() - this.lastAttempt < this.opts.reconnectEveryMs) return;
    this.begin();
  }

  /**
   * Connect now, and again every `reconnectEveryMs` while not listening, until close(). Resolves
   * once the attempt it started (or found under way) has settled, listening or not; never rejects.
   */
  keep(): Promise<void> {
    if (!this.keeper && !this.closed) {
      // The timer paces the attempts: no spacing check, which a timer firing a millisecond early
      // by the wall clock would fail, skipping a whole period.
      this.keeper = setInterval(() => this.begin(), this.opts.reconnectEveryMs);
      this.keeper.unref();
    }
    this.begin();
    return this.attempt ?? Promise.resolve();
  }

  /** Start an attempt unless closed, listening, or one is under way. */
  private begin(): void {
    if (this.closed || this.client || this.attempt) return;
    this.lastAttempt = this.now();
    const client = new pg.Client({
      connectionString: (this.db.pool.options as { connectionString?: string }).connectionString,
      connectionTimeoutMillis: listenerConnectMs,
    });
    client.on('error', (err) => this.lose(client, err.message));
    client.on('end', () => this.lose(client, 'connection ended'));
    client.on('notification', (n) => {
      if (n.channel === this.echoChannel) this.heard.set(client, n.payload ?? '');
      else this.hooks.onNotify(n.channel, n.payload ?? '');
    });
    this.attempt = this.connect(client).finally(() => {
      this.attempt = undefined;
    });
  }

  /** Connect, LISTEN and prepare `client`, then take it as the listener; never rejects. */
  private async connect(client: pg.Client): Promise<void> {
    try {
      await client.connect();
      if (this.closed) throw new Error(`${this.opts.name} closed while it connected`);
      this.readying = client;
      // A peer that went silent after the connect would hold the attempt (and every later one) for ever.
      await within(client, this.opts.readyMs ?? listenerConnectMs, this.ready(client));
      if (this.closed) throw new Error(`${this.opts.name} closed while it connected`);
    } catch (err) {
      const why = (err as Error).message;
      // Ended before the attempt settles: close() awaits it to leave no connection open.
      await endClient(client);
      if (this.closed) return;
      this.log[this.opts.attemptLogLevel ?? 'warn']({ err: why }, `${this.opts.name} could not connect`);
      this.hooks.onAttemptFailed?.(why);
      return;
    } finally {
      this.readying = undefined;
    }
    this.client = client;
    this.heartbeat = setInterval(() => void this.beat(client), this.opts.heartbeatMs ?? listenerHeartbeatMs);
    this.heartbeat.unref();
    this.hooks.onListening();
  }

  /** LISTEN on every channel, then let the owner read what notifications alone would not tell it. */
  private async ready(client: pg.Client): Promise<void> {
    for (const channel of [...this.opts.channels, this.echoChannel]) await client.query(`LISTEN ${channel}`);
    await this.echo(client);
    if (this.closed) throw new Error(`${this.opts.name} closed while it connected`);
    await this.hooks.prepare?.(client);
  }

  /** Ask the listening connection to answer; one that does not in time is lost. */
  private async beat(client: pg.Client): Promise<void> {
    if (this.beating) return;
    this.beating = true;
    const timer = setTimeout(() => {
      this.lose(client, `no answer to a heartbeat within ${listenerConnectMs} ms`);
    }, listenerConnectMs);
    try {
      await this.echo(client);
      // Only the listener's own answer says notifications are arriving.
      if (this.client === client) this.hooks.onAnswered?.();
    } catch (err) {
      this.lose(client, (err as Error).message);
    } finally {
      clearTimeout(timer);
      this.beating = false;
    }
  }

  /**
   * NOTIFY this listener's own channel on `client` and hear it back, or throw. PostgreSQL delivers
   * a session's notification to itself before the answer to the statement that sent it.
   */
  private async echo(client: pg.Client): Promise<void> {
    const payload = String(++this.asked);
    await client.query('SELECT pg_notify($1, $2)', [this.echoChannel, payload]);
    if (this.heard.get(client) !== payload)
      throw new Error('a heartbeat was answered but its notification not heard');
  }

  /** `client` is no longer the listener (when it still was): the owner is told, and it is ended. */
  private lose(client: pg.Client, why: string): void {
    if (this.client !== client) return;
    this.client = undefined;
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    this.log.warn({ err: why }, `${this.opts.name} lost; ${this.opts.whileDown} until it is back`);
    this.hooks.onLost(why);
    void endClient(client);
  }

  /** Stop: no attempt after this, the listener and an attempt under way ended, no timer left. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.keeper);
    this.keeper = undefined;
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    if (this.readying) void endClient(this.readying);
    await this.attempt;
    const client = this.client;
    this.client = undefined;
    if (client) await endClient(client);
  }
}
