/**
 * What the edge needs from PostgreSQL, cached in memory (DESIGN.md "State the edge needs"):
 * sessions, tenants, relationship tuples and service tokens; signing keys through the
 * KeyStore. `LISTEN` on the change channels (shared/db/listener.ts, as every core cache's) drops
 * entries as soon as a change commits, and its heartbeat bounds staleness: when the listener has
 * not answered for `maxStalenessMs`, `assertFresh()` throws and every decision is a deny.
 */
import { firstUse } from '../../shared/replay.ts';
import { hash } from 'node:crypto';
import type { Logger } from 'pino';
import { Listener } from '../../shared/db/listener.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { KeyDrops } from '../../shared/key-drops.ts';
import { startupPoolMax } from '../../shared/startup.ts';
import { stepUpUseOf } from '../../shared/stepup-uses.ts';
import { tenantIdPattern } from '../../shared/tenant-id.ts';
import { apiKeySealVersion, type ApiKeySecrets } from '../../shared/api-key-secrets.ts';
import { channels as notifyChannels, payloadField } from '../../shared/notify.ts';
import { tokenClockToleranceS, type TokenVerifier } from '../../shared/token-keys.ts';
import { FailClosedError } from '../metrics.ts';

export interface SessionState {
  id: string;
  tenantId: string;
  subjectType: string;
  subjectId: string;
  aal: number;
  device: string | null;
  ip: string | null;
  lastSeenMs: number;
  revoked: boolean;
}

export interface TenantState {
  id: string;
  status: string;
  security: Record<string, unknown>;
  /** Issue 20 item 3: the platform operator's tenant (the policy's `parent` view is its only). */
  platform: boolean;
}

export interface TupleState {
  relation: string;
  object_ns: string;
  object_id: string;
  caveat: Record<string, unknown>;
}

/** A customer's device key as the edge needs it (issue 13 item 1: removal is refused at once). */
export interface DeviceState {
  id: string;
  tenantId: string;
  customerId: string;
  revoked: boolean;
}

/** A staff member as the edge needs it (issue 14 item 5: deprovisioning is refused at once). */
export interface StaffMemberState {
  id: string;
  tenantId: string;
  /** Active and not deleted (a SCIM `active: false` or DELETE ends every token at once). */
  active: boolean;
  /**
   * The roles the member holds now (staff_user_roles): a role removed by SCIM or the admin API
   * stops counting at the next request, not when the access token carrying it expires.
   */
  roles: string[];
}

export interface ServiceTokenState {
  id: string;
  tenantId: string;
  name: string;
  roles: string[];
  expiresAtMs: number | null;
  revoked: boolean;
}

/** A tenant's SCIM bearer credential (issue 14 item 1). */
export interface ScimCredentialState {
  id: string;
  tenantId: string;
  revoked: boolean;
}

/** Past this without a database answer, cached state is not trusted (fail closed). */
export const maxStalenessMs = 5_000;
/**
 * The listener answers a heartbeat this often (each answer keeps the state fresh for
 * `maxStalenessMs`), and a lost one is reconnected this often, one attempt at a time.
 */
export const heartbeatMs = 1_000;
/** Entries are re-read at least this often even without a notification (safety net). */
export const entryTtlMs = 30_000;
/** last_seen updates are written in batches at most this often. */
export const lastSeenFlushMs = 1_000;
/**
 * The longest the listener may take to LISTEN and load the used grants once connected, before
 * its connection is given up and another is opened (a heartbeat may go unanswered for
 * shared/db/listener.ts's listenerConnectMs, 2 s). A peer that is gone without a word (failover,
 * a dropped NAT entry) never answers, and the kernel gives up on it only after about 15 minutes:
 * until a new listener answers, every decision is a deny.
 */
export const listenerReadyMs = maxStalenessMs;

export interface ApiKeyState {
  id: string;
  tenantId: string;
  secret: Buffer;
  secretHash: Buffer;
  /** The previous secret during a rotation's grace period. */
  previous: { secret: Buffer; secretHash: Buffer; validUntilMs: number } | undefined;
  scopes: string[];
  budget: { daily_amount?: string; currency?: string; per_minute?: number };
  ipAllowlist: string[];
  expiresAtMs: number | null;
  revoked: boolean;
}

/** Entries per cache (sessions, tenants, tuples, tokens, keys): memory stays bounded under floods of unknown ids. */
const maxCachedEntries = 100_000;
/**
 * The cache key of a row looked up by tenant and id. The id alone is not enough: a lookup under
 * another tenant (an id a caller names, such as `x-intent-device-id`) finds no row, and that miss
 * cached under the bare id would hide the real row (a revoked device) from its own tenant.
 */
const tenantScoped = (tenantId: string, id: string): string => `${tenantId}\u0000${id}`;

/** On a NOTIFY naming a tenant and an id, drop that entry; without both, the whole map. */
function dropEntry(map: Map<string, unknown>, payload: string, idField: string): void {
  const tenantId = payloadField(payload, 'tenantId');
  const id = payloadField(payload, idField);
  if (tenantId && id) map.delete(tenantScoped(tenantId, id));
  else map.clear();
}

/** At most this many tenants and service tokens are loaded ahead at start (warm()). */
export const warmEntriesMax = 1_000;

const channels = Object.values(notifyChannels);

interface Entry<T> {
  value: T | undefined;
  at: number;
}

/** A cache key for a subject's tuples, in one tenant or in all (`*`). */
const tupleKey = (ns: string, id: string, tenantId: string | undefined) =>
  `${ns}\u0000${id}\u0000${tenantId ?? '*'}`;

export class EdgeState {
  private readonly sessions = new Map<string, Entry<SessionState>>();
  private readonly tenants = new Map<string, Entry<TenantState>>();
  private readonly tuples = new Map<string, Entry<TupleState[]>>();
  /** A customer's live consents (purpose names), by `tenant:customer`. */
  private readonly consents = new Map<string, Entry<string[]>>();
  /**
   * Bumped on every change notification of what these maps hold (not keys_changed, not
   * stepup_used: neither changes an entry here): loads that started before one are not cached.
   */
  private generation = 0;
  private readonly serviceTokens = new Map<string, Entry<ServiceTokenState>>();
  private readonly apiKeys = new Map<string, Entry<ApiKeyState>>();
  private readonly scimCredentials = new Map<string, Entry<ScimCredentialState>>();
  private readonly devices = new Map<string, Entry<DeviceState>>();
  private readonly staff = new Map<string, Entry<StaffMemberState>>();
  /** Active OAuth clients by id → their tenant (issue 17: a revoked client's tokens stop at once). */
  private readonly oauthClients = new Map<string, Entry<string>>();
  private readonly seen = new Set<string>();
  /**
   * Used request-bound step-ups by `tenant NUL jti` → the Idempotency-Key that used each ('' for
   * none) and the grant's expiry. Complete while `usedGrantsComplete`: loaded when the listener
   * connects, then kept by `stepup_used` notifications; otherwise (listener lost, or more live
   * grants than the cap) every lookup reads the row.
   */
  private readonly usedGrants = new Map<string, { key: string; expiresAtMs: number }>();
  private usedGrantsComplete = false;
  /**
   * The step-up lookups' generation: bumped when the used set may have missed a use (a
   * `stepup_used` not understood, the set cleared past its cap). A load of the set under way
   * meanwhile keeps its rows but does not make the set complete.
   */
  private usedGrantsGeneration = 0;
  private readonly listener: Listener;
  /** When the listener last answered (listening, or a heartbeat): the staleness bound counts from it. */
  private healthyAt = 0;
  /** The last connect or heartbeat failure of the listener, cleared when it answers. */
  private lastListenerError: string | undefined;
  private timers: NodeJS.Timeout[] = [];
  private readonly now: () => number;

  private readonly stalenessMs: number;
  /**
   * Drops of `keys` on NOTIFY keys_changed, rate-bounded as every core's (shared/key-drops.ts): a
   * storm of payloads naming no tenant re-read every tenant's key set once per notification.
   */
  private readonly keyDrops: KeyDrops;

  constructor(
    private readonly db: Db,
    /** Public halves of the tenant key sets: the edge verifies tokens and can sign none. */
    readonly keys: TokenVerifier,
    /** Opens API-key secrets (and nothing else). */
    private readonly apiKeySecrets: ApiKeySecrets,
    private readonly log: Logger,
    opts: { now?: () => number; maxStalenessMs?: number } = {},
  ) {
    this.now = opts.now ?? Date.now;
    this.stalenessMs = opts.maxStalenessMs ?? maxStalenessMs;
    this.keyDrops = new KeyDrops(log, keys);
    this.listener = new Listener(
      db,
      log,
      {
        name: 'edge state listener',
        whileDown: 'serving cache within the staleness bound',
        channels,
        reconnectEveryMs: heartbeatMs,
        heartbeatMs,
        readyMs: listenerReadyMs,
        attemptLogLevel: 'debug',
      },
      {
        onNotify: (channel, payload) => this.onNotify(channel, payload),
        prepare: (client) => this.prepareListener(client),
        onListening: () => this.answered(),
        onAnswered: () => this.answered(),
        onLost: (why) => {
          this.lastListenerError = why;
          this.usedGrantsComplete = false;
        },
        onAttemptFailed: (why) => {
          this.lastListenerError = why;
        },
      },
    );
  }

  /**
   * Start the last-seen flusher, and the listener: connected once now, again every second while
   * lost. A first connect that fails is not fatal: until one succeeds the state is not fresh
   * (decisions deny, the edge is not ready, listenerError() says why). Failing here made the edge
   * exit when one connect timed out on a loaded machine.
   */
  async start(): Promise<void> {
    this.timers.push(setInterval(() => void this.flushLastSeen(), lastSeenFlushMs));
    this.timers.push(setInterval(() => this.pruneUsedGrants(), entryTtlMs));
    for (const t of this.timers) t.unref();
    await this.listener.keep();
  }

  /** Why the listener is not answering (its last connect or heartbeat error), while it is not. */
  listenerError(): string | undefined {
    return this.isFresh() ? undefined : (this.lastListenerError ?? 'not connected yet');
  }

  /** Stop: last-seen flushed, the listener (and an attempt under way) ended, no timer left. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.keyDrops.close();
    await this.flushLastSeen();
    await this.listener.close();
  }

  /** The listener answered: notifications are arriving, the cached state is fresh from now. */
  private answered(): void {
    this.healthyAt = this.now();
    this.lastListenerError = undefined;
  }

  /**
   * On a new listener connection, once it LISTENs and before it counts as listening: drop every
   * entry (anything may have changed while nobody listened), then load the used grants on it. Not
   * after: the heartbeat would queue behind a slow load on the same connection and, past
   * its deadline, end it; until then used grants are read from their rows.
   */
  private async prepareListener(client: Queryable): Promise<void> {
    this.invalidateAll();
    await this.loadUsedGrants(client);
  }

  /**
   * Every live used grant, read after LISTEN so that none committed meanwhile is missed (a
   * notification arriving during the read only adds what the read may also return).
   */
  private async loadUsedGrants(client: Queryable): Promise<void> {
    this.usedGrantsComplete = false;
    const generation = this.usedGrantsGeneration;
    const { rows } = await client.query<{
      tenant_id: string;
      grant_jti: string;
      idempotency_key: string | null;
      expires_ms: string;
    }>(
      `SELECT tenant_id, grant_jti, idempotency_key, floor(extract(epoch FROM expires_at) * 1000)::bigint AS expires_ms
         FROM stepup_uses WHERE expires_at > now() - make_interval(secs => $2) LIMIT $1`,
      [maxCachedEntries + 1, tokenClockToleranceS],
    );
    if (rows.length > maxCachedEntries) return;
    for (const r of rows)
      this.usedGrants.set(`${r.tenant_id}\u0000${r.grant_jti}`, {
        key: r.idempotency_key ?? '',
        expiresAtMs: Number(r.expires_ms),
      });
    // A notification not understood while we read (it arrives before the read's answer) may have
    // been a use this read missed: the set is not complete.
    this.usedGrantsComplete = generation === this.usedGrantsGeneration;
  }

  private pruneUsedGrants(): void {
    const now = this.now();
    // Kept while its token is still accepted: until its expiry plus the verifier's clock tolerance.
    const keepMs = tokenClockToleranceS * 1000;
    for (const [k, v] of this.usedGrants) if (v.expiresAtMs + keepMs <= now) this.usedGrants.delete(k);
    this.boundUsedGrants();
  }

  /**
   * Past the cap the set is cleared and no longer trusted (lookups read the rows until the next
   * load): memory stays bounded under a storm of announced uses, not only at the next prune.
   */
  private boundUsedGrants(): void {
    if (this.usedGrants.size <= maxCachedEntries) return;
    this.usedGrants.clear();
    this.usedGrantsComplete = false;
    this.usedGrantsGeneration++;
  }

  private onNotify(channel: string, payload: string): void {
    if (channel === notifyChannels.keys) {
      // Key sets are the verifier's, whose reads under way are not cached after a drop; no entry
      // here changes. Bumping `generation` made a storm of these (any session may send them)
      // discard every lookup under way, so that a Check met a session or tenant read each time.
      this.keyDrops.notified(payload);
      return;
    }
    if (channel === notifyChannels.stepUpUsed) {
      // Only the used set changes, which no lookup above reads: a step-up lookup reads the set or
      // the row, and caches neither. Bumping `generation` made every transfer's use discard every
      // session, tenant and other lookup under way at every edge.
      this.noteUsedGrant(payload);
      return;
    }
    // A lookup already in flight when this arrives may carry the old row: it must not be cached.
    this.generation++;
    if (channel === notifyChannels.sessions) {
      dropEntry(this.sessions, payload, 'sessionId');
    } else if (channel === notifyChannels.tenants) {
      this.tenants.delete(payload);
    } else if (channel === notifyChannels.tuples) {
      const ns = payloadField(payload, 'subjectNs');
      const id = payloadField(payload, 'subjectId');
      const t = payloadField(payload, 'tenantId');
      if (ns && id && t) {
        this.tuples.delete(tupleKey(ns, id, undefined));
        this.tuples.delete(tupleKey(ns, id, t));
      } else this.tuples.clear();
    } else if (channel === notifyChannels.consents) {
      const t = payloadField(payload, 'tenantId');
      const c = payloadField(payload, 'customerId');
      if (t && c) this.consents.delete(`${t}:${c}`);
      else this.consents.clear();
    } else if (channel === notifyChannels.devices) {
      dropEntry(this.devices, payload, 'deviceId');
    } else if (channel === notifyChannels.staff) {
      dropEntry(this.staff, payload, 'userId');
    } else if (channel === notifyChannels.apiKeys) {
      this.apiKeys.delete(payload);
    } else if (channel === notifyChannels.serviceTokens) {
      this.serviceTokens.clear();
    } else if (channel === notifyChannels.scimCredentials) {
      // Keyed by token hash, the payload names the id: drop them all (revocations are rare).
      this.scimCredentials.clear();
    } else if (channel === notifyChannels.oauthClients) {
      this.oauthClients.delete(payload);
    }
  }

  private noteUsedGrant(payload: string): void {
    let g: { tenantId?: unknown; grantJti?: unknown; idempotencyKey?: unknown; expiresAtMs?: unknown };
    try {
      g = JSON.parse(payload) as typeof g;
    } catch {
      g = {};
    }
    if (
      typeof g.tenantId !== 'string' ||
      typeof g.grantJti !== 'string' ||
      typeof g.expiresAtMs !== 'number'
    ) {
      // Not understood: lookups read the rows until the listener reconnects and reloads them
      // (a load under way would otherwise make the set complete again without this use).
      this.usedGrantsComplete = false;
      this.usedGrantsGeneration++;
      return;
    }
    this.usedGrants.set(`${g.tenantId}\u0000${g.grantJti}`, {
      key: typeof g.idempotencyKey === 'string' ? g.idempotencyKey : '',
      expiresAtMs: g.expiresAtMs,
    });
    this.boundUsedGrants();
  }

  invalidateAll(): void {
    this.generation++;
    this.sessions.clear();
    this.tenants.clear();
    this.tuples.clear();
    this.consents.clear();
    this.serviceTokens.clear();
    this.scimCredentials.clear();
    this.apiKeys.clear();
    this.devices.clear();
    this.staff.clear();
    this.oauthClients.clear();
    this.keys.invalidate();
  }

  /** Whether decisions can use the cached state now (the listener answered within the bound). */
  isFresh(): boolean {
    return this.now() - this.healthyAt <= this.stalenessMs;
  }

  /** Throw when the database has been silent longer than the staleness bound (counted as `stale_state`). */
  assertFresh(): void {
    if (this.now() - this.healthyAt > this.stalenessMs)
      throw new FailClosedError('stale_state', 'edge state is stale: database unreachable');
  }

  /** Seconds since the database last answered (edge_state_age_seconds). */
  ageSeconds(): number {
    return Math.max(0, this.now() - this.healthyAt) / 1000;
  }

  /** Entries per cache (edge_cache_entries). */
  cacheSizes(): Record<string, number> {
    return {
      sessions: this.sessions.size,
      tenants: this.tenants.size,
      tuples: this.tuples.size,
      service_tokens: this.serviceTokens.size,
      scim_credentials: this.scimCredentials.size,
      api_keys: this.apiKeys.size,
      devices: this.devices.size,
      staff: this.staff.size,
    };
  }

  private async cached<T>(
    map: Map<string, Entry<T>>,
    key: string,
    load: () => Promise<T | undefined>,
  ): Promise<T | undefined> {
    this.assertFresh();
    const hit = map.get(key);
    if (hit && this.now() - hit.at < entryTtlMs) return hit.value;
    const generation = this.generation;
    const value = await load();
    // Read before a change was announced: answer this caller, but keep nothing.
    if (generation !== this.generation) return value;
    // Misses are cached too (a flood of unknown ids must not reach the database each time), so
    // the maps are bounded: past the cap the oldest entry goes.
    map.delete(key);
    map.set(key, { value, at: this.now() });
    if (map.size > maxCachedEntries) map.delete(map.keys().next().value as string);
    return value;
  }

  session(tenantId: string, id: string): Promise<SessionState | undefined> {
    return this.cached(this.sessions, tenantScoped(tenantId, id), async () => {
      const { rows } = await this.db.query<{
        id: string;
        tenant_id: string;
        subject_type: string;
        subject_id: string;
        aal: number;
        device: string | null;
        ip: string | null;
        last_seen: Date;
        revoked_at: Date | null;
      }>(
        `SELECT id, tenant_id, subject_type, subject_id, aal, device, ip, last_seen, revoked_at FROM sessions WHERE id = $1 AND tenant_id = $2`,
        [id, tenantId],
      );
      const r = rows[0];
      return (
        r && {
          id: r.id,
          tenantId: r.tenant_id,
          subjectType: r.subject_type,
          subjectId: r.subject_id,
          aal: Number(r.aal),
          device: r.device,
          ip: r.ip,
          lastSeenMs: r.last_seen.getTime(),
          revoked: r.revoked_at !== null,
        }
      );
    }).then((s) => (s && s.tenantId === tenantId ? s : undefined));
  }

  /** A customer device key by id (cached; dropped on `devices_changed`). */
  device(tenantId: string, id: string): Promise<DeviceState | undefined> {
    return this.cached(this.devices, tenantScoped(tenantId, id), async () => {
      const { rows } = await this.db.query<{
        id: string;
        tenant_id: string;
        customer_id: string;
        revoked_at: Date | null;
      }>(
        'SELECT id, tenant_id, customer_id, revoked_at FROM customer_devices WHERE id = $1 AND tenant_id = $2',
        [id, tenantId],
      );
      const r = rows[0];
      return (
        r && { id: r.id, tenantId: r.tenant_id, customerId: r.customer_id, revoked: r.revoked_at !== null }
      );
    }).then((d) => (d && d.tenantId === tenantId ? d : undefined));
  }

  /** A staff member by id (cached; dropped on `staff_changed`, which migration 0800's triggers send). */
  staffMember(tenantId: string, id: string): Promise<StaffMemberState | undefined> {
    return this.cached(this.staff, tenantScoped(tenantId, id), async () => {
      const { rows } = await this.db.query<{
        id: string;
        tenant_id: string;
        active: boolean;
        deleted_at: Date | null;
        roles: string[];
      }>(
        `SELECT u.id, u.tenant_id, u.active, u.deleted_at,
                ARRAY(SELECT r.role FROM staff_user_roles r WHERE r.tenant_id = u.tenant_id AND r.user_id = u.id ORDER BY r.role) AS roles
           FROM staff_users u WHERE u.id = $1 AND u.tenant_id = $2`,
        [id, tenantId],
      );
      const r = rows[0];
      return (
        r && { id: r.id, tenantId: r.tenant_id, active: r.active && r.deleted_at === null, roles: r.roles }
      );
    }).then((m) => (m && m.tenantId === tenantId ? m : undefined));
  }

  /**
   * Use up a staff member's request-bound step-up (issue 14 item 5: a token carrying `orig` is
   * good for that one request, once). Recorded in `stepup_uses` like a customer's grant, so every
   * edge agrees at once. True when this request may use it: the first use, or a retry carrying
   * the Idempotency-Key of the request that used it (core answers that with the stored response).
   */
  async useStaffStepUp(g: {
    tenantId: string;
    jti: string;
    sessionId: string;
    userId: string;
    orig: string;
    action: string;
    idempotencyKey: string | undefined;
    expS: number;
  }): Promise<boolean> {
    this.assertFresh();
    const { rows } = await this.db.query<{ idempotency_key: string | null; fresh: boolean }>(
      `WITH ins AS (
         INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now(), to_timestamp($8))
         ON CONFLICT (tenant_id, grant_jti) DO NOTHING RETURNING idempotency_key)
       SELECT idempotency_key, true AS fresh FROM ins
       UNION ALL SELECT idempotency_key, false FROM stepup_uses WHERE tenant_id = $1 AND grant_jti = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
      [g.tenantId, g.jti, g.sessionId, g.userId, g.orig, g.action, g.idempotencyKey ?? null, g.expS],
    );
    const r = rows[0];
    if (!r) return false;
    return r.fresh || (g.idempotencyKey !== undefined && r.idempotency_key === g.idempotencyKey);
  }

  /**
   * Whether a request-bound step-up (the AAL 2 token `grantJti`) was used up by a committed
   * action: the Idempotency-Key that used it ('' for none), or undefined while unused. From
   * memory while the used set is complete (loaded at connect, kept by `stepup_used`), otherwise
   * from the row. A use committed a moment ago may not have reached this edge yet: core, which
   * records the use in the action's own transaction, refuses that replay itself.
   */
  async stepUpUse(tenantId: string, grantJti: string): Promise<string | undefined> {
    this.assertFresh();
    if (this.usedGrantsComplete) {
      return this.usedGrants.get(`${tenantId}\u0000${grantJti}`)?.key;
    }
    return stepUpUseOf(this.db, tenantId, grantJti);
  }

  /** Record activity: the in-memory copy at once, the row in the next batch. */
  touchSession(s: SessionState): void {
    s.lastSeenMs = this.now();
    this.seen.add(`${s.tenantId}\u0000${s.id}`);
  }

  private async flushLastSeen(): Promise<void> {
    if (this.seen.size === 0) return;
    const batch = [...this.seen];
    this.seen.clear();
    const tenants = batch.map((b) => b.split('\u0000')[0] as string);
    const ids = batch.map((b) => b.split('\u0000')[1] as string);
    await this.db
      .query(
        `UPDATE sessions s SET last_seen = greatest(s.last_seen, now())
         FROM unnest($1::text[], $2::uuid[]) AS t(tenant_id, id) WHERE s.tenant_id = t.tenant_id AND s.id = t.id`,
        [tenants, ids],
      )
      .catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'last_seen flush failed'));
  }

  /** A tenant's state; read through `q` when not cached (the warm-up passes its start-up pool). */
  tenant(id: string, q: Queryable = this.db): Promise<TenantState | undefined> {
    // Not a tenant id (the tenants table's CHECK): no such tenant, and no query with bytes
    // PostgreSQL would refuse (a NUL from a JSON body made the lookup throw: a 503 for bad input).
    if (!tenantIdPattern.test(id)) return Promise.resolve(undefined);
    return this.cached(this.tenants, id, async () => {
      const { rows } = await q.query<TenantState>(
        'SELECT id, status, security, EXISTS (SELECT 1 FROM platform_operator p WHERE p.tenant_id = tenants.id) AS platform FROM tenants WHERE id = $1',
        [id],
      );
      return rows[0];
    });
  }

  /**
   * The subject's tuples. A customer's or staff member's are read in their own tenant only
   * (`tenantId`; tenant isolation, even were an id to repeat across tenants); a tenant's own
   * relations (owner, parent of tenants it created) are across tenants by nature.
   */
  async tuplesOf(ns: string, id: string, tenantId?: string): Promise<TupleState[]> {
    const list = await this.cached(this.tuples, tupleKey(ns, id, tenantId), async () => {
      const { rows } = await this.db.query<TupleState>(
        `SELECT relation, object_ns, object_id, caveat FROM relationship_tuples
          WHERE subject_ns = $1 AND subject_id = $2 AND ($3::text IS NULL OR tenant_id = $3)`,
        [ns, id, tenantId ?? null],
      );
      return rows;
    });
    return list ?? [];
  }

  /**
   * The purposes a customer has a recorded, not withdrawn, consent for (SPEC 2.5
   * consent_required; the policy's check_consent reads them as subject.consents). A withdrawal
   * reaches every edge by NOTIFY (consents_changed) like any other change.
   */
  async consentsOf(tenantId: string, customerId: string): Promise<string[]> {
    const list = await this.cached(this.consents, `${tenantId}:${customerId}`, async () => {
      const { rows } = await this.db.query<{ purpose: string }>(
        'SELECT purpose FROM customer_consents WHERE tenant_id = $1 AND customer_id = $2 AND withdrawn_at IS NULL ORDER BY purpose',
        [tenantId, customerId],
      );
      return rows.map((r) => r.purpose);
    });
    return list ?? [];
  }

  /**
   * A service token by its bearer value (looked up by SHA-256, never stored in clear). The
   * previous token of a rotation matches until its grace period ends (issue 14 item 6): its
   * expiry is then the earlier of the token's and the grace period's.
   */
  serviceToken(token: string): Promise<ServiceTokenState | undefined> {
    const hex = hash('sha256', token);
    return this.cached(this.serviceTokens, hex, async () => {
      const { rows } = await this.db.query<ServiceTokenRow>(
        `SELECT id, tenant_id, name, roles, revoked_at,
                CASE WHEN token_hash = $1 THEN expires_at ELSE LEAST(expires_at, prev_valid_until) END AS expires_at
         FROM service_tokens WHERE token_hash = $1 OR prev_token_hash = $1`,
        [Buffer.from(hex, 'hex')],
      );
      return rows[0] && serviceTokenState(rows[0]);
    });
  }

  /** A SCIM credential by its bearer value (SHA-256; dropped on `scim_credentials_changed`). */
  scimCredential(token: string): Promise<ScimCredentialState | undefined> {
    const hex = hash('sha256', token);
    return this.cached(this.scimCredentials, hex, async () => {
      const { rows } = await this.db.query<{ id: string; tenant_id: string; revoked_at: Date | null }>(
        'SELECT id, tenant_id, revoked_at FROM scim_credentials WHERE token_hash = $1',
        [Buffer.from(hex, 'hex')],
      );
      const r = rows[0];
      return r && { id: r.id, tenantId: r.tenant_id, revoked: r.revoked_at !== null };
    });
  }

  /**
   * Issue 15 item 9: what the first requests after start need, loaded before the edge reports
   * ready: every tenant (up to `warmEntriesMax`) with its verification keys, and the live
   * service tokens (machine clients and staff tooling are often the first callers). Read through
   * `q`, the warm-up's start-up pool (shared/startup.ts startupPool: each statement bounded), one
   * tenant at a time per connection of it.
   */
  async warm(q: Queryable, connections = startupPoolMax): Promise<void> {
    const generation = this.generation;
    const [{ rows: tenants }, { rows: tokens }] = await Promise.all([
      q.query<{ id: string }>('SELECT id FROM tenants ORDER BY id LIMIT $1', [warmEntriesMax]),
      q.query<ServiceTokenRow & { token_hash: Buffer }>(
        `SELECT ${serviceTokenColumns}, token_hash FROM service_tokens WHERE revoked_at IS NULL ORDER BY id LIMIT $1`,
        [warmEntriesMax],
      ),
    ]);
    // A token changed while we read is not cached (as in cached()).
    if (generation === this.generation) {
      for (const t of tokens)
        this.serviceTokens.set(t.token_hash.toString('hex'), { value: serviceTokenState(t), at: this.now() });
    }
    const ids = tenants.map((t) => t.id);
    const loadNext = async (): Promise<void> => {
      for (let id = ids.pop(); id !== undefined; id = ids.pop()) {
        await this.tenant(id, q);
        // A tenant without a signing key yet has nothing to verify.
        await this.keys.verificationKeys(id, q).catch(() => undefined);
      }
    };
    await Promise.all(Array.from({ length: connections }, loadNext));
  }

  /** Whether the OAuth client `clientId` of `tenantId` exists and is not revoked. */
  async oauthClientActive(tenantId: string, clientId: string): Promise<boolean> {
    const owner = await this.cached(this.oauthClients, clientId, async () => {
      const { rows } = await this.db.query<{ tenant_id: string }>(
        'SELECT tenant_id FROM oauth_clients WHERE client_id = $1 AND revoked_at IS NULL',
        [clientId],
      );
      return rows[0]?.tenant_id;
    });
    return owner === tenantId;
  }

  /** An API key by id, its secrets opened with the API-key sealing key (kept in memory only). */
  apiKey(id: string): Promise<ApiKeyState | undefined> {
    return this.cached(this.apiKeys, id, async () => {
      const { rows } = await this.db.query<{
        id: string;
        tenant_id: string;
        secret_enc: Buffer;
        secret_hash: Buffer;
        prev_secret_enc: Buffer | null;
        prev_secret_hash: Buffer | null;
        prev_valid_until: Date | null;
        scopes: string[];
        budget: ApiKeyState['budget'];
        ip_allowlist: string[];
        expires_at: Date | null;
        revoked_at: Date | null;
        seal: number;
      }>(
        `SELECT id, tenant_id, secret_enc, secret_hash, prev_secret_enc, prev_secret_hash, prev_valid_until, scopes, budget,
                ip_allowlist::text[] AS ip_allowlist, expires_at, revoked_at, seal FROM api_keys WHERE id = $1`,
        [id],
      );
      const r = rows[0];
      if (!r) return undefined;
      // Sealed with the master key, which the edge does not hold: core re-seals it at start-up.
      // Until then the edge cannot judge the request; the key is the client's and valid, so the
      // answer is not invalid_key (a client told so discards it) but a fail-closed 503, and
      // nothing is cached: the next request after the re-seal reads the row again.
      if (r.seal !== apiKeySealVersion)
        throw new Error(`API key ${r.id} is not yet re-sealed for the edge (core re-seals it at start-up)`);
      return {
        id: r.id,
        tenantId: r.tenant_id,
        secret: this.apiKeySecrets.open(r.id, r.secret_enc),
        secretHash: r.secret_hash,
        previous:
          r.prev_secret_enc && r.prev_secret_hash && r.prev_valid_until
            ? {
                secret: this.apiKeySecrets.open(r.id, r.prev_secret_enc),
                secretHash: r.prev_secret_hash,
                validUntilMs: r.prev_valid_until.getTime(),
              }
            : undefined,
        scopes: r.scopes,
        budget: r.budget,
        ipAllowlist: r.ip_allowlist,
        expiresAtMs: r.expires_at?.getTime() ?? null,
        revoked: r.revoked_at !== null,
      };
    });
  }

  /** Run `fn` in one transaction (budget counters). */
  tx<T>(fn: (q: import('../../shared/db/pool.ts').Queryable) => Promise<T>): Promise<T> {
    this.assertFresh();
    return this.db.tx(fn);
  }

  /** Record a one-time value (DPoP jti, nonce) across all edges; false when already seen. */
  async firstUse(kind: string, value: string, ttlMs: number): Promise<boolean> {
    this.assertFresh();
    return firstUse(this.db, kind, value, ttlMs);
  }
}

interface ServiceTokenRow {
  id: string;
  tenant_id: string;
  name: string;
  roles: string[];
  expires_at: Date | null;
  revoked_at: Date | null;
}
const serviceTokenColumns = 'id, tenant_id, name, roles, expires_at, revoked_at';

function serviceTokenState(r: ServiceTokenRow): ServiceTokenState {
  return {
    id: r.id,
    tenantId: r.tenant_id,
    name: r.name,
    roles: r.roles,
    expiresAtMs: r.expires_at?.getTime() ?? null,
    revoked: r.revoked_at !== null,
  };
}
