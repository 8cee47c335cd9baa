/**
 * Every core drops a tenant's cached key material (its verification keys and its signer,
 * core/keys/keys.ts) as soon as any core announces a change: a tenant's first key and every
 * rotation NOTIFY `keys_changed` with the tenant id at commit (KeyStore.insertKey), and each core
 * LISTENs through shared/db/listener.ts. Without it, a key retired through one core kept verifying
 * at the others, and they kept signing with the previous key, for their caches' 60 s.
 *
 * Guarantees:
 * - a notification naming a tenant drops that tenant's keys at once: the next token verified or
 *   signed for it reads the table, which already holds the change (a NOTIFY is delivered after its
 *   commit); a read under way when it arrives answers its waiters and is not cached;
 * - a payload that is no tenant id (empty, or anything else: any database session may NOTIFY any
 *   text on the channel) cannot say whose keys changed, so every tenant's keys are dropped. It is
 *   never parsed further, and a payload that is not empty is warned about at most once per
 *   `malformedWarnEveryMs`, by its length only (its text is nobody's to log);
 * - drops are rate-bounded, never lost: each tenant's at most once per `tenantDropGapMs`, every
 *   tenant's at most once per `allDropGapMs`; one asked for within its gap is applied once at the
 *   gap's end. A storm of notifications thus costs each tenant at most one read of its key set and
 *   one of its signer per gap (for all-tenant drops the bound forged key ids already have,
 *   shared/token-keys.ts `unknownKidReloadMs`), not one per notification;
 * - at most `trackedTenantsMax` tenants are within their gap at once: past it, a tenant's drop
 *   becomes a drop of every tenant (memory stays bounded under a flood of distinct ids);
 * - when the listener connects (again) every tenant's keys are dropped: changes made while nobody
 *   listened were announced to no one;
 * - the caches' own expiry (`keyCacheTtlMs`) stays the fallback: a NOTIFY reaches only a live
 *   connection, and one that dies without a word is noticed only by the listener's heartbeat.
 */
import type { Logger } from 'pino';
import { Listener } from '../../shared/db/listener.ts';
import type { Db } from '../../shared/db/pool.ts';
import { channels } from '../../shared/notify.ts';
import { tenantIdPattern } from '../../shared/tenant-id.ts';
import { keyCacheTtlMs, unknownKidReloadMs } from '../../shared/token-keys.ts';
import type { KeyStore } from './keys.ts';

/** A tenant's keys are dropped at most this often (a rotation right after its first key waits this long at most). */
export const tenantDropGapMs = 100;
/** Every tenant's keys are dropped at most this often: the re-read bound forged key ids already have. */
export const allDropGapMs = unknownKidReloadMs;
/** Tenants within their gap at once, beyond which a tenant's drop is a drop of every tenant. */
export const trackedTenantsMax = 10_000;
/** Reconnect attempts of a lost listener are at least this far apart. */
export const keysReconnectMs = 5_000;
/** A payload that is no tenant id is warned about at most this often. */
export const malformedWarnEveryMs = 60_000;

/** The drop of every tenant's keys, under a name no tenant id can have. */
const everyTenant = '';

export class KeySync {
  private readonly listener: Listener;
  /** What was dropped within its gap (a tenant id, or everyTenant), and whether it is due again at the gap's end. */
  private readonly recent = new Map<string, { due: boolean; timer: NodeJS.Timeout }>();
  private reconnect: NodeJS.Timeout | undefined;
  private warnedAt = Number.NEGATIVE_INFINITY;
  private closed = false;

  constructor(
    db: Db,
    private readonly log: Logger,
    private readonly keys: Pick<KeyStore, 'invalidate'>,
    private readonly opts: {
      reconnectEveryMs?: number;
      /** Default `tenantDropGapMs` (tests lengthen it to hold tenants within their gap). */
      tenantDropGapMs?: number;
    } = {},
  ) {
    this.listener = new Listener(
      db,
      log,
      {
        name: 'key listener',
        whileDown: `signing keys are re-read every ${keyCacheTtlMs / 1000} s`,
        channels: [channels.keys],
        reconnectEveryMs: opts.reconnectEveryMs ?? keysReconnectMs,
      },
      {
        onNotify: (_channel, payload) => this.notified(payload),
        onListening: () => this.drop(everyTenant),
        // The caches' own expiry bounds them meanwhile; the return drops them all.
        onLost: () => undefined,
      },
    );
  }

  /** Whether changes are being announced to this core (the LISTEN connection is up). */
  get listening(): boolean {
    return this.listener.listening;
  }

  /** Connect the listener now, and again whenever it is lost, until close(). */
  listen(): void {
    if (this.closed || this.reconnect) return;
    this.listener.ensure();
    this.reconnect = setInterval(() => this.listener.ensure(), this.opts.reconnectEveryMs ?? keysReconnectMs);
    this.reconnect.unref();
  }

  private notified(payload: string): void {
    if (tenantIdPattern.test(payload)) {
      this.drop(payload);
      return;
    }
    if (payload !== '' && Date.now() - this.warnedAt >= malformedWarnEveryMs) {
      this.warnedAt = Date.now();
      this.log.warn(
        { channel: channels.keys, payloadLength: payload.length },
        `a key change named no tenant: every tenant's keys are dropped (at most every ${allDropGapMs} ms)`,
      );
    }
    this.drop(everyTenant);
  }

  /** Drop `what`'s keys now, or once at the end of its gap when they were dropped within it. */
  private drop(what: string): void {
    if (this.closed) return;
    const seen = this.recent.get(what);
    if (seen) {
      seen.due = true;
      return;
    }
    if (what !== everyTenant && this.recent.size >= trackedTenantsMax) {
      this.drop(everyTenant);
      return;
    }
    this.keys.invalidate(what === everyTenant ? undefined : what);
    const gapMs = what === everyTenant ? allDropGapMs : (this.opts.tenantDropGapMs ?? tenantDropGapMs);
    const timer = setTimeout(() => this.gapEnded(what), gapMs);
    timer.unref();
    this.recent.set(what, { due: false, timer });
  }

  private gapEnded(what: string): void {
    const seen = this.recent.get(what);
    this.recent.delete(what);
    if (seen?.due) this.drop(what);
  }

  /** Stop listening: the connection is ended and no timer is left behind. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.reconnect);
    for (const { timer } of this.recent.values()) clearTimeout(timer);
    this.recent.clear();
    await this.listener.close();
  }
}
