/**
 * Verification of tenant access tokens with the public halves of the tenant key sets (SPEC 2.4.1,
 * 3): what the edge holds. It reads `signing_keys.public_jwk` only and can sign nothing; core's
 * KeyStore (core/keys/keys.ts) adds the private halves. Key sets are cached per tenant and dropped
 * on NOTIFY `keys_changed` (shared/notify.ts) or after `cacheTtlMs`.
 */
import { createPublicKey, type KeyObject } from 'node:crypto';
import { decodeJwt, decodeProtectedHeader, errors, type JWK, type JWTPayload } from 'jose';
import type { Db, Queryable } from './db/pool.ts';
import { verifyJwt } from './jws.ts';
import { SharedReads } from './shared-reads.ts';
import { tenantIdPattern } from './tenant-id.ts';

/** How far past `exp` (and before `nbf`) a token is still accepted, unless a caller says otherwise. */
export const tokenClockToleranceS = 5;

export interface VerificationKey {
  kid: string;
  state: 'active' | 'grace';
  key: KeyObject;
  graceUntil: number | undefined;
}

/** The token issuer of a tenant (`iss`); verifiers require it to match the token's `tid`. */
export function issuerFor(tenantId: string): string {
  return `urn:payments:tenant:${tenantId}`;
}

export class KeyError extends Error {
  constructor(
    readonly code: 'NO_KEY' | 'UNKNOWN_KID' | 'BAD_TOKEN',
    message: string,
  ) {
    super(message);
  }
}

/**
 * Whether `verify` refused the token itself (its form, key id, signature or claims) rather than
 * failed to judge it: a key set that could not be read (the database away, its pool exhausted) or
 * a stored key that cannot be used is the service's fault. A caller answers the first 401
 * invalid_token and must let the second through as unavailable (503): a client told its token is
 * invalid throws it away and signs in again, and the edge would count it as a wrong credential
 * against the caller's address.
 */
export function isTokenFault(err: unknown): boolean {
  return err instanceof KeyError || err instanceof errors.JOSEError;
}

/** Cached key sets are re-read at least this often, NOTIFY or not. */
export const keyCacheTtlMs = 60_000;
/**
 * A token naming a key its tenant's cached set lacks re-reads the set once this long after it was
 * read (a key made since, whose NOTIFY was missed or raced the read); forged key ids cost a tenant
 * at most one read per interval.
 */
export const unknownKidReloadMs = 1_000;
/**
 * Keys a tenant holds in grace at most: each rotation retires the older ones at once
 * (core/keys/keys.ts), and a key set is read as the active key and at most this many grace keys
 * within their window, the newest first. Every key of a set is parsed at each read and searched at
 * each token, and a set is re-read at every rotation's NOTIFY and for forged key ids (once a
 * second): unbounded, one tenant's Admin or service token rotating in a loop (the admin rate limit
 * allows 600 a minute, each key in grace up to 24 h) grew its set to tens of thousands of keys, and
 * each read of it held the edge's and core's event loop for most of a second, for every tenant.
 * Tokens live at most 10 minutes: only a sixth rotation within ten minutes cuts one short.
 */
export const graceKeysMax = 5;
/** Bound on remembered verified tokens (oldest dropped first). */
const verifiedCacheMax = 20_000;
/**
 * Default bound on cached tenant key sets (oldest dropped first). The tenant is read from a
 * token before its signature is checked, so a flood of forged tokens naming unknown tenants must
 * not grow this cache without limit (the edge bounds its other caches alike, edge/state/store.ts).
 */
const keySetCacheMax = 100_000;

interface PublicKeySet {
  verifiers: VerificationKey[];
  loadedAt: number;
  /** When a token naming a key the set lacks last had it re-read (the read itself, at first). */
  reloadAt: number;
}

export class TokenVerifier {
  private readonly publicSets = new Map<string, PublicKeySet>();
  /** Tokens already verified (a client reuses its access token): signature checks skipped until exp. */
  private readonly verified = new Map<
    string,
    { payload: JWTPayload & { tid: string }; kid: string; validUntilMs: number }
  >();
  /** The clock tokens are checked against (exp, and iat by shared/access-token.ts). */
  readonly now: () => number;

  /** ISSUER_URL (issue 17 item 5): client-credentials tokens carry it as `iss` instead of the tenant's. */
  readonly issuerUrl: string | undefined;

  private readonly keySetsMax: number;

  constructor(
    protected readonly db: Db,
    opts: { now?: () => number; issuerUrl?: string | undefined; keySetsMax?: number } = {},
  ) {
    this.now = opts.now ?? Date.now;
    this.issuerUrl = opts.issuerUrl;
    this.keySetsMax = opts.keySetsMax ?? keySetCacheMax;
  }

  /**
   * Key-set reads under way, one per tenant: callers that miss the cache meanwhile share it, so a
   * burst of tokens (forged key ids included) costs one query, not one each.
   */
  private readonly reads = new SharedReads<PublicKeySet>();

  /**
   * Drop one tenant's cached keys (or all): called on NOTIFY `keys_changed`. A read of that tenant
   * (or any, for all) under way is used by those already waiting for it and not cached: it may
   * predate the key announced. Reads of other tenants are untouched.
   */
  invalidate(tenantId?: string): void {
    if (tenantId) this.publicSets.delete(tenantId);
    else this.publicSets.clear();
    this.reads.overtake(tenantId);
  }

  private loadPublic(tenantId: string, q: Queryable): Promise<PublicKeySet> {
    const hit = this.publicSets.get(tenantId);
    if (hit && this.now() - hit.loadedAt < keyCacheTtlMs) return Promise.resolve(hit);
    return this.readShared(tenantId, q);
  }

  /** The tenant's key set read once for every caller until it answers (see `reads`). */
  private readShared(tenantId: string, q: Queryable): Promise<PublicKeySet> {
    return this.reads.read(
      tenantId,
      () => this.readPublic(tenantId, q),
      (entry) => this.keep(tenantId, entry),
    );
  }

  private keep(tenantId: string, entry: PublicKeySet): void {
    this.publicSets.delete(tenantId);
    this.publicSets.set(tenantId, entry);
    if (this.publicSets.size > this.keySetsMax)
      this.publicSets.delete(this.publicSets.keys().next().value as string);
  }

  /**
   * The tenant's active key and its newest grace keys still within their window, at most
   * `graceKeysMax` of them however many the table holds (keys put in grace before rotations
   * retired the older ones).
   */
  private keyRows(tenantId: string, q: Queryable) {
    return q.query<{ kid: string; public_jwk: JWK; state: 'active' | 'grace'; grace_until: Date | null }>(
      `SELECT kid, public_jwk, state, grace_until FROM signing_keys
       WHERE tenant_id = $1 AND (state = 'active' OR (state = 'grace' AND grace_until > to_timestamp($2 / 1000.0)))
       ORDER BY state = 'active' DESC, created_at DESC LIMIT $3`,
      [tenantId, this.now(), graceKeysMax + 1],
    );
  }

  private async readPublic(tenantId: string, q: Queryable): Promise<PublicKeySet> {
    const { rows } = await this.keyRows(tenantId, q);
    const verifiers = rows.map((r) => ({
      kid: r.kid,
      state: r.state,
      graceUntil: r.grace_until?.getTime(),
      key: createPublicKey({ key: r.public_jwk as import('node:crypto').JsonWebKey, format: 'jwk' }),
    }));
    const loadedAt = this.now();
    return { verifiers, loadedAt, reloadAt: loadedAt };
  }

  /**
   * Keys a verifier may use now: active, and grace keys inside their window. A key set not cached
   * is read through `q` (the edge's warm-up passes its start-up pool).
   */
  async verificationKeys(tenantId: string, q: Queryable = this.db): Promise<VerificationKey[]> {
    return this.usable(await this.loadPublic(tenantId, q));
  }

  private usable(keys: PublicKeySet): VerificationKey[] {
    const now = this.now();
    return keys.verifiers.filter(
      (k) => k.state === 'active' || (k.graceUntil !== undefined && k.graceUntil > now),
    );
  }

  /**
   * The tenant's keys read again for a token naming a key its cached set lacks (a key made since,
   * whose NOTIFY was missed or raced the read), or undefined when the set is not cached or was
   * (re)read less than `unknownKidReloadMs` ago: forged key ids cost a tenant at most one read per
   * interval, failed reads included, and the cached set keeps serving the other tokens meanwhile
   * (also while the database is away). A read already under way is joined.
   */
  private async reread(tenantId: string): Promise<VerificationKey[] | undefined> {
    if (!this.reads.has(tenantId)) {
      const cached = this.publicSets.get(tenantId);
      if (!cached || this.now() - cached.reloadAt < unknownKidReloadMs) return undefined;
      cached.reloadAt = this.now();
    }
    return this.usable(await this.readShared(tenantId, this.db));
  }

  /**
   * Verify a JWT: its `tid` selects the tenant's key set, its `kid` the key (active or grace),
   * and `iss`, `aud`, `exp` must hold. Throws KeyError or a jose error on any failure.
   */
  async verify(
    token: string,
    opts: { audience: string; typ?: string; clockToleranceS?: number },
  ): Promise<JWTPayload & { tid: string }> {
    const tolerance = opts.clockToleranceS ?? tokenClockToleranceS;
    const cacheKey = `${opts.audience}|${opts.typ ?? ''}|${tolerance}|${token}`;
    const hit = this.verified.get(cacheKey);
    if (hit && this.now() < hit.validUntilMs) {
      // The key may have been retired since: it must still be a verification key.
      if ((await this.verificationKeys(hit.payload.tid)).some((k) => k.kid === hit.kid)) return hit.payload;
    }
    if (hit) this.verified.delete(cacheKey);
    let kid: string | undefined;
    let tid: unknown;
    try {
      kid = decodeProtectedHeader(token).kid;
      tid = decodeJwt(token).tid;
    } catch {
      throw new KeyError('BAD_TOKEN', 'token is not a JWT');
    }
    // The unverified `tid` chooses the key set: text no tenant id can be (the tenants table's
    // CHECK) is refused before any lookup, so forged tokens cost no query and no cache entry.
    if (typeof tid !== 'string' || !tenantIdPattern.test(tid) || !kid)
      throw new KeyError('BAD_TOKEN', 'token has no tenant or key id');
    const byKid = (k: VerificationKey) => k.kid === kid;
    const key = (await this.verificationKeys(tid)).find(byKid) ?? (await this.reread(tid))?.find(byKid);
    if (!key) throw new KeyError('UNKNOWN_KID', 'token key is unknown, retired or of another tenant');
    const { payload } = await verifyJwt(token, key.key, {
      algorithms: ['EdDSA'],
      issuer: this.issuerUrl ? [issuerFor(tid), this.issuerUrl] : issuerFor(tid),
      audience: opts.audience,
      currentDate: new Date(this.now()),
      clockTolerance: tolerance,
      ...(opts.typ ? { typ: opts.typ } : {}),
    });
    const result = payload as JWTPayload & { tid: string };
    if (typeof result.exp === 'number') {
      this.verified.set(cacheKey, { payload: result, kid, validUntilMs: (result.exp + tolerance) * 1000 });
      if (this.verified.size > verifiedCacheMax)
        this.verified.delete(this.verified.keys().next().value as string);
    }
    return result;
  }

  /** The tenant's public JWKS: the keys its tokens verify with (`keyRows`). */
  async jwks(tenantId: string): Promise<{ keys: JWK[] }> {
    const { rows } = await this.keyRows(tenantId, this.db);
    return { keys: rows.map((r) => r.public_jwk) };
  }
}
