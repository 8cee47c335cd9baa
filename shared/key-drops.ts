/**
 * What a process that caches tenant keys does with NOTIFY `keys_changed`: every core
 * (core/keys/key-sync.ts: verification keys and signer) and every edge (edge/state/store.ts:
 * verification keys) drop the named tenant's keys through this one class. A tenant's first key
 * and every rotation NOTIFY the tenant id at commit (core/keys/keys.ts insertKey).
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
 *   gap's end. A storm of notifications thus costs each tenant at most one read of its key set (and
 *   at core one of its signer) per gap (for all-tenant drops the bound forged key ids already have,
 *   shared/token-keys.ts `unknownKidReloadMs`), not one per notification;
 * - at most `trackedTenantsMax` tenants are within their gap at once: past it, a tenant's drop
 *   becomes a drop of every tenant (memory stays bounded under a flood of distinct ids);
 * - after close() nothing is dropped and no timer is left behind.
 */
import type { Logger } from 'pino';
import { channels } from './notify.ts';
import { tenantIdPattern } from './tenant-id.ts';
import { type TokenVerifier, unknownKidReloadMs } from './token-keys.ts';

/** A tenant's keys are dropped at most this often (a rotation right after its first key waits this long at most). */
export const tenantDropGapMs = 100;
/** Every tenant's keys are dropped at most this often: the re-read bound forged key ids already have. */
export const allDropGapMs = unknownKidReloadMs;
/** Tenants within their gap at once, beyond which a tenant's drop is a drop of every tenant. */
export const trackedTenantsMax = 10_000;
/** A payload that is no tenant id is warned about at most this often. */
export const malformedWarnEveryMs = 60_000;

/** The drop of every tenant's keys, under a name no tenant id can have. */
const everyTenant = '';

export class KeyDrops {
  /** What was dropped within its gap (a tenant id, or everyTenant), and whether it is due again at the gap's end. */
  private readonly recent = new Map<string, { due: boolean; timer: NodeJS.Timeout }>();
  private warnedAt = Number.NEGATIVE_INFINITY;
  private closed = false;

  constructor(
    private readonly log: Logger,
    private readonly keys: Pick<TokenVerifier, 'invalidate'>,
    private readonly opts: {
      /** Default `tenantDropGapMs` (tests lengthen it to hold tenants within their gap). */
      tenantDropGapMs?: number;
    } = {},
  ) {}

  /** A `keys_changed` payload: the tenant it names, or every tenant when it names none. */
  notified(payload: string): void {
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

  /** Every tenant's keys (the listener connected again: changes meanwhile were announced to no one). */
  dropAll(): void {
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

  /** No more drops; every gap's timer cleared. */
  close(): void {
    this.closed = true;
    for (const { timer } of this.recent.values()) clearTimeout(timer);
    this.recent.clear();
  }
}
