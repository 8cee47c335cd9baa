/**
 * Every core's snapshot of admin's currency table (core/ledger/currency.ts) follows the table
 * within moments of a change, whichever core or writer made it: migration 1101 NOTIFYs
 * `currencies_changed` at commit, and each core LISTENs (shared/db/listener.ts) and reloads.
 *
 * Guarantees:
 * - a snapshot is only ever replaced by a complete load: a failed reload keeps the last one (and
 *   is logged at warn with the database's message only, then tried again: `currencyRetryMs`);
 * - no request waits for a reload: requests read the snapshot in place, a reload swaps it;
 * - one reload at a time, and a change announced while one runs is followed by one more reload
 *   after it: the running SELECT may have read the table before that change committed;
 * - a reload never puts back what this core's own admin write replaced: the write applies itself
 *   to the snapshot after its commit (applyCommittedCurrency), and a reload whose SELECT began
 *   before that is dropped and followed by one more (its read may predate the commit; the
 *   write's NOTIFY may not come, the listener being down). Other writers' changes reach the
 *   snapshot only by reloads, one at a time, each read after the last: none is undone by an
 *   older. Not counted: an account opened here sets its currency from the row it locks
 *   (core/ledger/accounts.ts); an older read differs from that only by a re-scale committed in
 *   between, whose NOTIFY brings one more reload;
 * - reloads start at least `currencyReloadGapMs` apart: the first after a quiet spell at once, and a storm of
 *   announcements (a burst of writes, or NOTIFYs any session may send) costs one per gap;
 * - when the listener connects (again) the table is reloaded once: changes made while nobody
 *   listened were announced to no one;
 * - the table is also reloaded every `reloadEveryMs` whatever was heard (the fallback): a NOTIFY
 *   reaches only a live connection, and one that dies without a word is noticed only by the
 *   listener's heartbeat (shared/db/listener.ts), so this bounds how stale a snapshot can get.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { Listener } from '../../../shared/db/listener.ts';
import type { Db, Queryable } from '../../../shared/db/pool.ts';
import { channels } from '../../../shared/notify.ts';
import { applyLedgerCurrencies, type CurrencyRead, readLedgerCurrencies } from './currencies.ts';

/** The fallback: how often a core reloads the snapshot even with nothing announced. */
export const currencyReloadMs = 30_000;
/**
 * A failed reload is tried again this soon (its snapshot may be behind), then twice as late after
 * each failure in a row, up to the periodic reload's period: a database that is down is not asked
 * every few seconds, and the listener's return reloads anyway.
 */
export const currencyRetryMs = 2_000;
/** A reload's SELECT not answered by then fails (a silent database must not hold every later reload). */
export const currencyAnswerMs = 5_000;
/** Reconnect attempts of a lost listener are at least this far apart. */
export const currencyReconnectMs = 5_000;
/**
 * Reloads start at least this far apart: changes announced meanwhile are read by the next one. A
 * burst of writes, or NOTIFYs sent by any session, costs a core one reload per gap, not one each.
 */
export const currencyReloadGapMs = 100;

export interface CurrencySyncOptions {
  reloadEveryMs?: number;
  retryMs?: number;
  answerMs?: number;
  reconnectEveryMs?: number;
  /**
   * The read of the table (tests hold one between its SELECT and its application, to change the
   * table meanwhile); default: readLedgerCurrencies. Its result is applied by applyLedgerCurrencies.
   */
  read?: (q: Queryable) => Promise<CurrencyRead>;
}

export class CurrencySync {
  private readonly listener: Listener;
  private readonly timers: NodeJS.Timeout[] = [];
  private retry: NodeJS.Timeout | undefined;
  /** Reloads failed in a row (the retry's backoff). */
  private failures = 0;
  /** The reload under way, if any. */
  private running: Promise<void> | undefined;
  /** A change was announced (or a reload asked for) while one ran: run one more after it. */
  private again = false;
  /** When the last reload started (the gap before the next). */
  private lastStart = Number.NEGATIVE_INFINITY;
  /** Ends the wait for the gap at once (close). */
  private wake: (() => void) | undefined;
  private closed = false;
  private readonly q: Queryable;
  private readonly read: (q: Queryable) => Promise<CurrencyRead>;
  private readonly opts: Required<Omit<CurrencySyncOptions, 'read'>>;

  constructor(
    db: Db,
    private readonly log: Logger,
    opts: CurrencySyncOptions = {},
  ) {
    this.opts = {
      reloadEveryMs: opts.reloadEveryMs ?? currencyReloadMs,
      retryMs: opts.retryMs ?? currencyRetryMs,
      answerMs: opts.answerMs ?? currencyAnswerMs,
      reconnectEveryMs: opts.reconnectEveryMs ?? currencyReconnectMs,
    };
    this.read = opts.read ?? readLedgerCurrencies;
    // pg fails the query past its read timeout (a per-query option its types omit), and the pool
    // discards that connection.
    this.q = {
      query: <R extends pg.QueryResultRow>(text: string, values?: unknown[]) =>
        db.pool.query<R>({
          text,
          ...(values ? { values } : {}),
          query_timeout: this.opts.answerMs,
        } as pg.QueryConfig),
    };
    this.listener = new Listener(
      db,
      log,
      {
        name: 'currency listener',
        whileDown: `currencies are reloaded every ${this.opts.reloadEveryMs / 1000} s`,
        channels: [channels.currencies],
        reconnectEveryMs: this.opts.reconnectEveryMs,
      },
      {
        onNotify: () => this.reload(),
        onListening: () => this.reload(),
        onLost: () => undefined,
      },
    );
  }

  /** Whether changes are being announced to this core (the LISTEN connection is up). */
  get listening(): boolean {
    return this.listener.listening;
  }

  /**
   * Load the snapshot now (an entry point that did not await its own load serves 503 until this
   * lands, never a wrong refusal), then every `reloadEveryMs` until close().
   */
  start(): void {
    this.reload();
    this.timers.push(setInterval(() => this.reload(), this.opts.reloadEveryMs));
    for (const t of this.timers) t.unref();
  }

  /** Connect the listener now, and again whenever it is lost, until close(). */
  listen(): void {
    void this.listener.keep();
  }

  /** Reload the snapshot: now, or right after the reload under way. Never waits for it. */
  reload(): void {
    if (this.closed) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.reloadUntilCurrent().finally(() => {
      this.running = undefined;
    });
  }

  /** Whether a reload is due right after the one under way (a change was announced meanwhile). */
  get queued(): boolean {
    return this.running !== undefined && this.again;
  }

  /** Resolves once no reload is running or due after the running one. */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async reloadUntilCurrent(): Promise<void> {
    do {
      await this.gap();
      if (this.closed) return;
      // What was announced before this point is read by the load that starts now.
      this.again = false;
      this.lastStart = Date.now();
      try {
        // Overtaken by a local write: this read may be older than it; read again after the gap.
        if (!applyLedgerCurrencies(await this.read(this.q))) this.again = true;
        this.failures = 0;
      } catch (err) {
        const { message, code } = err as { message?: unknown; code?: unknown };
        this.failures++;
        const retryInMs = this.retryDelayMs();
        this.log.warn(
          { err: String(message), ...(typeof code === 'string' ? { code } : {}), retryInMs },
          'reloading the ledger currencies failed; the last snapshot stays',
        );
        this.retrySoon(retryInMs);
        return;
      }
    } while (this.again && !this.closed);
  }

  /** Resolves `currencyReloadGapMs` after the last reload started (at once when that is past), or at close(). */
  private gap(): Promise<void> {
    const waitMs = this.lastStart + currencyReloadGapMs - Date.now();
    if (waitMs <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.wake?.(), waitMs);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
    });
  }

  /** Backoff after the n-th failure in a row: retryMs, doubling, at most the periodic reload. */
  private retryDelayMs(): number {
    return Math.min(this.opts.retryMs * 2 ** (this.failures - 1), this.opts.reloadEveryMs);
  }

  private retrySoon(delayMs: number): void {
    if (this.retry || this.closed) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.reload();
    }, delayMs);
    this.retry.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.wake?.();
    for (const t of this.timers) clearInterval(t);
    if (this.retry) clearTimeout(this.retry);
    await this.listener.close();
  }
}
