/**
 * Per-tenant EdDSA (Ed25519) signing keys: one `active` key signs; after a rotation the old
 * key stays `grace` (verifies, never signs) until `grace_until`, then is `retired` (SPEC 3,
 * at most 24 h overlap). Verifiers accept `active` and unexpired `grace` keys only. Keys are
 * cached per tenant; a change NOTIFYs `keys_changed` so other processes drop their cache.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import { SignJWT, decodeJwt, decodeProtectedHeader, jwtVerify, type JWK, type JWTPayload } from 'jose';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { open, seal } from './crypto.ts';

/** SPEC 3: at most 24 hours of overlap between an old and a new key. */
export const maxGraceS = 24 * 60 * 60;
/** Default overlap: longer than any access token lives, well under the 24 h cap. */
export const defaultGraceS = 60 * 60;
export const keysChannel = 'keys_changed';

export interface VerificationKey {
  kid: string;
  state: 'active' | 'grace';
  key: KeyObject;
  graceUntil: number | undefined;
}

interface TenantKeys {
  signer: { kid: string; key: KeyObject } | undefined;
  verifiers: VerificationKey[];
  loadedAt: number;
}

/** The token issuer of a tenant (`iss`); verifiers require it to match the token's `tid`. */
export function issuerFor(tenantId: string): string {
  return `urn:payments:tenant:${tenantId}`;
}

export class KeyError extends Error {
  constructor(readonly code: 'NO_KEY' | 'UNKNOWN_KID' | 'BAD_TOKEN', message: string) {
    super(message);
  }
}

/** Cached key sets are re-read at least this often, NOTIFY or not. */
const cacheTtlMs = 60_000;
/** Bound on remembered verified tokens (oldest dropped first). */
const verifiedCacheMax = 20_000;

export class KeyStore {
  private readonly cache = new Map<string, TenantKeys>();
  /** Tokens already verified (a client reuses its access token): signature checks skipped until exp. */
  private readonly verified = new Map<string, { payload: JWTPayload & { tid: string }; kid: string; validUntilMs: number }>();
  private readonly now: () => number;

  constructor(private readonly db: Db, private readonly masterKey: Buffer, opts: { now?: () => number } = {}) {
    this.now = opts.now ?? Date.now;
  }

  /** Drop one tenant's cached keys (or all): called on NOTIFY `keys_changed`. */
  invalidate(tenantId?: string): void {
    if (tenantId) this.cache.delete(tenantId);
    else this.cache.clear();
  }

  private async load(tenantId: string): Promise<TenantKeys> {
    const hit = this.cache.get(tenantId);
    if (hit && this.now() - hit.loadedAt < cacheTtlMs) return hit;
    const { rows } = await this.db.query<{ kid: string; public_jwk: JWK; private_enc: Buffer; state: 'active' | 'grace'; grace_until: Date | null }>(
      `SELECT kid, public_jwk, private_enc, state, grace_until FROM signing_keys
       WHERE tenant_id = $1 AND state IN ('active', 'grace') ORDER BY created_at DESC`,
      [tenantId],
    );
    let signer: TenantKeys['signer'];
    const verifiers: VerificationKey[] = [];
    for (const r of rows) {
      const key = createPublicKey({ key: r.public_jwk as import('node:crypto').JsonWebKey, format: 'jwk' });
      verifiers.push({ kid: r.kid, state: r.state, key, graceUntil: r.grace_until?.getTime() });
      if (r.state === 'active') {
        const der = open(this.masterKey, r.private_enc, r.kid);
        signer = { kid: r.kid, key: createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }) };
      }
    }
    const entry = { signer, verifiers, loadedAt: this.now() };
    this.cache.set(tenantId, entry);
    return entry;
  }

  /** Create the tenant's first active key if it has none (idempotent, race-safe). */
  async ensureActive(tenantId: string): Promise<string> {
    const keys = await this.load(tenantId);
    if (keys.signer) return keys.signer.kid;
    const kid = await this.db.tx(async (client) => {
      await client.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]);
      const { rows } = await client.query<{ kid: string }>(`SELECT kid FROM signing_keys WHERE tenant_id = $1 AND state = 'active'`, [tenantId]);
      return rows[0]?.kid ?? this.insertKey(client, tenantId);
    });
    this.invalidate(tenantId);
    return kid;
  }

  private async insertKey(client: Queryable, tenantId: string): Promise<string> {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const kid = `${tenantId}-${randomBytes(8).toString('hex')}`;
    const jwk = { ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' };
    const sealed = seal(this.masterKey, privateKey.export({ format: 'der', type: 'pkcs8' }), kid);
    await client.query(
      `INSERT INTO signing_keys (kid, tenant_id, public_jwk, private_enc, state) VALUES ($1, $2, $3, $4, 'active')`,
      [kid, tenantId, JSON.stringify(jwk), sealed],
    );
    await client.query(`SELECT pg_notify($1, $2)`, [keysChannel, tenantId]);
    return kid;
  }

  /**
   * Rotate: a new active key; the previous active key becomes `grace` for `graceS` seconds
   * (capped at 24 h); grace keys past their window become `retired`.
   */
  async rotate(tenantId: string, graceS = defaultGraceS): Promise<{ kid: string; previous: string | undefined }> {
    const result = await this.db.tx((client) => this.rotateIn(client, tenantId, graceS));
    this.invalidate(tenantId);
    return result;
  }

  /**
   * Rotate inside the caller's transaction (so its audit record commits or rolls back with it).
   * The caller drops this process's cache (`invalidate`) after commit; other processes drop
   * theirs on the NOTIFY, which is delivered at commit.
   */
  async rotateIn(client: Queryable, tenantId: string, graceS = defaultGraceS): Promise<{ kid: string; previous: string | undefined }> {
    const grace = Math.min(Math.max(graceS, 0), maxGraceS);
    await client.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]);
    await this.retireExpired(client, tenantId);
    const { rows } = await client.query<{ kid: string }>(
      `UPDATE signing_keys SET state = 'grace', grace_until = to_timestamp($2 / 1000.0) + make_interval(secs => $3)
       WHERE tenant_id = $1 AND state = 'active' RETURNING kid`,
      [tenantId, this.now(), grace],
    );
    const kid = await this.insertKey(client, tenantId);
    return { kid, previous: rows[0]?.kid };
  }

  private async retireExpired(client: Queryable, tenantId: string): Promise<void> {
    await client.query(
      `UPDATE signing_keys SET state = 'retired', retired_at = now()
       WHERE tenant_id = $1 AND state = 'grace' AND grace_until <= to_timestamp($2 / 1000.0)`,
      [tenantId, this.now()],
    );
  }

  /** Keys a verifier may use now: active, and grace keys inside their window. */
  async verificationKeys(tenantId: string): Promise<VerificationKey[]> {
    const keys = await this.load(tenantId);
    const now = this.now();
    return keys.verifiers.filter((k) => k.state === 'active' || (k.graceUntil !== undefined && k.graceUntil > now));
  }

  /** Sign a JWT with the tenant's active key; `iat`, `exp`, `iss` and `kid` are set here. */
  async sign(tenantId: string, claims: JWTPayload & Record<string, unknown>, opts: { expiresInS: number; typ?: string }): Promise<string> {
    await this.ensureActive(tenantId);
    const keys = await this.load(tenantId);
    if (!keys.signer) throw new KeyError('NO_KEY', `tenant ${tenantId} has no active signing key`);
    const nowS = Math.floor(this.now() / 1000);
    return new SignJWT({ ...claims, tid: tenantId })
      .setProtectedHeader({ alg: 'EdDSA', kid: keys.signer.kid, typ: opts.typ ?? 'JWT' })
      .setIssuer(issuerFor(tenantId))
      .setIssuedAt(nowS)
      .setExpirationTime(nowS + opts.expiresInS)
      .sign(keys.signer.key);
  }

  /**
   * Verify a JWT: its `tid` selects the tenant's key set, its `kid` the key (active or grace),
   * and `iss`, `aud`, `exp` must hold. Throws KeyError or a jose error on any failure.
   */
  async verify(token: string, opts: { audience: string; typ?: string; clockToleranceS?: number }): Promise<JWTPayload & { tid: string }> {
    const tolerance = opts.clockToleranceS ?? 5;
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
    if (typeof tid !== 'string' || !kid) throw new KeyError('BAD_TOKEN', 'token has no tenant or key id');
    const key = (await this.verificationKeys(tid)).find((k) => k.kid === kid);
    if (!key) throw new KeyError('UNKNOWN_KID', 'token key is unknown, retired or of another tenant');
    const { payload } = await jwtVerify(token, key.key, {
      algorithms: ['EdDSA'],
      issuer: issuerFor(tid),
      audience: opts.audience,
      currentDate: new Date(this.now()),
      clockTolerance: tolerance,
      ...(opts.typ ? { typ: opts.typ } : {}),
    });
    const result = payload as JWTPayload & { tid: string };
    if (typeof result.exp === 'number') {
      this.verified.set(cacheKey, { payload: result, kid, validUntilMs: (result.exp + tolerance) * 1000 });
      if (this.verified.size > verifiedCacheMax) this.verified.delete(this.verified.keys().next().value as string);
    }
    return result;
  }

  /** Envelope-encrypt another secret (e.g. a tenant's identity secret) with the master key. */
  sealSecret(plaintext: Buffer, aad: string): Buffer {
    return seal(this.masterKey, plaintext, `secret:${aad}`);
  }

  /** Open what `sealSecret` sealed with the same `aad`; throws if it was tampered with. */
  openSecret(sealed: Buffer, aad: string): Buffer {
    return open(this.masterKey, sealed, `secret:${aad}`);
  }

  /** The tenant's public JWKS: active and grace keys. */
  async jwks(tenantId: string): Promise<{ keys: JWK[] }> {
    const { rows } = await this.db.query<{ public_jwk: JWK; state: string; grace_until: Date | null }>(
      `SELECT public_jwk, state, grace_until FROM signing_keys WHERE tenant_id = $1 AND state IN ('active', 'grace') ORDER BY created_at DESC`,
      [tenantId],
    );
    const now = this.now();
    return { keys: rows.filter((r) => r.state === 'active' || (r.grace_until && r.grace_until.getTime() > now)).map((r) => r.public_jwk) };
  }
}
