/**
 * Every core drops a tenant's cached key material (its verification keys and its signer,
 * core/keys/keys.ts) as soon as any core announces a change: a tenant's first key and every
 * rotation NOTIFY `keys_changed` with the tenant id at commit (KeyStore.insertKey), and each core
 * LISTENs through shared/db/listener.ts. Without it, a key retired through one core kept verifying
 * at the others, and they kept signing with the previous key, for their caches' 60 s.
 *
 * Guarantees: those of shared/key-drops.ts (the edge's too): a tenant named is dropped at once, a
 * payload that names none drops every tenant, each rate-bounded and never lost; and
 * - when the listener connects (again) every tenant's keys are dropped: changes made while nobody
 *   listened were announced to no one;
 * - the caches' own expiry (`keyCacheTtlMs`) stays the fallback: a NOTIFY reaches only a live
 *   connection, and one that dies without a word is noticed only by the listener's heartbeat.
 */
import type { Logger } from 'pino';
import { Listener } from '../../shared/db/listener.ts';
import type { Db } from '../../shared/db/pool.ts';
import { KeyDrops } from '../../shared/key-drops.ts';
import { channels } from '../../shared/notify.ts';
import { keyCacheTtlMs } from '../../shared/token-keys.ts';
import type { KeyStore } from './keys.ts';

export {
  allDropGapMs,
  malformedWarnEveryMs,
  tenantDropGapMs,
  trackedTenantsMax,
} from '../../shared/key-drops.ts';

/** Reconnect attempts of a lost listener are at least this far apart. */
export const keysReconnectMs = 5_000;

export class KeySync {
  private readonly listener: Listener;
  private readonly drops: KeyDrops;

  constructor(
    db: Db,
    log: Logger,
    keys: Pick<KeyStore, 'invalidate'>,
    opts: {
      reconnectEveryMs?: number;
      /** Default `tenantDropGapMs` (tests lengthen it to hold tenants within their gap). */
      tenantDropGapMs?: number;
    } = {},
  ) {
    this.drops = new KeyDrops(
      log,
      keys,
      opts.tenantDropGapMs === undefined ? {} : { tenantDropGapMs: opts.tenantDropGapMs },
    );
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
        onNotify: (_channel, payload) => this.drops.notified(payload),
        onListening: () => this.drops.dropAll(),
        // The caches' own expiry bounds them meanwhile; the return drops them all.
        onLost: () => undefined,
      },
    );
  }

  /** Whether changes are being announced to this core (the LISTEN connection is up). */
  get listening(): boolean {
    return this.listener.listening;
  }

  /** Connect the listener now, and again whenever it is lost (every `reconnectEveryMs`), until close(). */
  listen(): void {
    void this.listener.keep();
  }

  /** Stop listening: the connection is ended and no timer is left behind. */
  async close(): Promise<void> {
    this.drops.close();
    await this.listener.close();
  }
}
