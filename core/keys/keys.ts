/**
 * Per-tenant EdDSA (Ed25519) signing keys: one `active` key signs; after a rotation the old
 * key stays `grace` (verifies, never signs) until `grace_until`, then is `retired` (SPEC 3,
 * at most 24 h overlap); a tenant holds at most `graceKeysMax` keys in grace, a rotation retiring
 * the older ones. Verification (public halves only) is shared/token-keys.ts, which the
 * edge uses alone; this store adds the private halves, opened with the master key, and only core
 * holds it. A change NOTIFYs `keys_changed` so other processes drop their cache: every edge
 * (edge/state/store.ts) and every core (core/keys/key-sync.ts).
 */
import { DpopNonces } from '../../shared/dpop.ts';
import { createPrivateKey, generateKeyPairSync, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';
import { SignJWT, type JWTPayload } from 'jose';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { ApiKeySecrets } from '../../shared/api-key-secrets.ts';
import { ChallengeKeys } from '../../shared/challenge.ts';
import { channels } from '../../shared/notify.ts';
import { open, seal } from '../../shared/sealing.ts';
import { SharedReads } from '../../shared/shared-reads.ts';
import { KeyError, TokenVerifier, graceKeysMax, issuerFor, keyCacheTtlMs } from '../../shared/token-keys.ts';

export { KeyError, graceKeysMax, issuerFor, type VerificationKey } from '../../shared/token-keys.ts';

/** SPEC 3: at most 24 hours of overlap between an old and a new key. */
export const maxGraceS = 24 * 60 * 60;
/** Default overlap: longer than any access token lives, well under the 24 h cap. */
export const defaultGraceS = 60 * 60;
export const keysChannel = channels.keys;

/**
 * The API-key sealing key when none is configured (development, tests): derived one-way from the
 * master key, so holding it (the edge does) reveals nothing of the master key.
 */
export function deriveApiKeySealKey(masterKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'payments/api-key-secrets/v1', 32));
}

/** The step-up challenge key when none is configured (development, tests): derived one-way likewise. */
export function deriveChallengeKey(masterKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'payments/stepup-challenges/v1', 32));
}

/**
 * Issue 22 item 1: the base of the per-tenant pseudonym keys decision inputs are recorded with,
 * derived one-way likewise; the edge holds it (to pseudonymise), core never needs it.
 */
export function deriveDecisionInputKey(masterKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'payments/decision-inputs/v1', 32));
}

/** What a rotation did: the new active key, the one it put in grace, and grace keys it retired early. */
export interface Rotation {
  kid: string;
  previous: string | undefined;
  /** Grace keys beyond the newest `graceKeysMax`, retired by this rotation (none in the usual case). */
  retired: string[];
}

/** A tenant's active private key, opened. */
type Signer = { kid: string; key: KeyObject };

export class KeyStore extends TokenVerifier {
  private readonly signers = new Map<string, { signer: Signer | undefined; loadedAt: number }>();
  /**
   * Reads of a tenant's active key under way, one per tenant, shared by every token signed while
   * it runs. One an invalidation overtakes may have read the key just replaced: it answers those
   * already waiting for it and is not cached (cached, it signed with that key for keyCacheTtlMs).
   */
  private readonly signerReads = new SharedReads<Signer | undefined>();
  /** Seals API-key secrets (the edge opens them with the same key, never with the master key). */
  readonly apiKeySecrets: ApiKeySecrets;
  /** Signs and verifies step-up challenges (the edge holds the same key; it mints nothing else). */
  readonly challenges: ChallengeKeys;
  /** DPoP server nonces (RFC 9449 §8), the same at every core (derived from the master key). */
  readonly dpopNonces: DpopNonces;

  constructor(
    db: Db,
    private readonly masterKey: Buffer,
    opts: {
      now?: () => number;
      apiKeySealKey?: Buffer;
      challengeKeys?: Buffer[];
      issuerUrl?: string | undefined;
    } = {},
  ) {
    super(db, opts);
    this.apiKeySecrets = new ApiKeySecrets(opts.apiKeySealKey ?? deriveApiKeySealKey(masterKey));
    const [current, ...previous] = opts.challengeKeys ?? [deriveChallengeKey(masterKey)];
    this.challenges = new ChallengeKeys(
      current ?? deriveChallengeKey(masterKey),
      previous,
      opts.now ? { now: opts.now } : {},
    );
    this.dpopNonces = new DpopNonces(
      Buffer.from(hkdfSync('sha256', masterKey, Buffer.alloc(0), 'payments/dpop-nonces/v1', 32)),
    );
  }

  /**
   * Drop one tenant's cached keys, public and private (or all): after this process changed them,
   * and on NOTIFY `keys_changed` (core/keys/key-sync.ts). Reads under way are not cached.
   */
  override invalidate(tenantId?: string): void {
    super.invalidate(tenantId);
    if (tenantId) this.signers.delete(tenantId);
    else this.signers.clear();
    this.signerReads.overtake(tenantId);
  }

  /** The tenant's active private key, opened with the master key (cached like the public set). */
  private signerOf(tenantId: string): Promise<Signer | undefined> {
    const hit = this.signers.get(tenantId);
    if (hit && this.now() - hit.loadedAt < keyCacheTtlMs) return Promise.resolve(hit.signer);
    return this.signerReads.read(
      tenantId,
      () => this.readSigner(tenantId),
      (signer) => this.signers.set(tenantId, { signer, loadedAt: this.now() }),
    );
  }

  private async readSigner(tenantId: string): Promise<Signer | undefined> {
    const { rows } = await this.db.query<{ kid: string; private_enc: Buffer }>(
      `SELECT kid, private_enc FROM signing_keys WHERE tenant_id = $1 AND state = 'active' ORDER BY created_at DESC LIMIT 1`,
      [tenantId],
    );
    const r = rows[0];
    if (!r) return undefined;
    return {
      kid: r.kid,
      key: createPrivateKey({
        key: open(this.masterKey, r.private_enc, r.kid),
        format: 'der',
        type: 'pkcs8',
      }),
    };
  }

  /** Create the tenant's first active key if it has none (idempotent, race-safe). */
  async ensureActive(tenantId: string): Promise<string> {
    const signer = await this.signerOf(tenantId);
    if (signer) return signer.kid;
    const kid = await this.db.tx(async (client) => {
      await client.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]);
      const { rows } = await client.query<{ kid: string }>(
        `SELECT kid FROM signing_keys WHERE tenant_id = $1 AND state = 'active'`,
        [tenantId],
      );
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
   * (capped at 24 h); grace keys past their window become `retired`, and so do those beyond the
   * newest `graceKeysMax` (named in `retired`).
   */
  async rotate(tenantId: string, graceS = defaultGraceS): Promise<Rotation> {
    const result = await this.db.tx((client) => this.rotateIn(client, tenantId, graceS));
    this.invalidate(tenantId);
    return result;
  }

  /**
   * Rotate inside the caller's transaction (so its audit record commits or rolls back with it).
   * The caller drops this process's cache (`invalidate`) after commit; other processes drop
   * theirs on the NOTIFY, which is delivered at commit.
   */
  async rotateIn(client: Queryable, tenantId: string, graceS = defaultGraceS): Promise<Rotation> {
    const grace = Math.min(Math.max(graceS, 0), maxGraceS);
    await client.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]);
    await this.retireExpired(client, tenantId);
    const { rows } = await client.query<{ kid: string }>(
      `UPDATE signing_keys SET state = 'grace', grace_until = to_timestamp($2 / 1000.0) + make_interval(secs => $3)
       WHERE tenant_id = $1 AND state = 'active' RETURNING kid`,
      [tenantId, this.now(), grace],
    );
    const retired = await this.retireBeyondBound(client, tenantId);
    const kid = await this.insertKey(client, tenantId);
    return { kid, previous: rows[0]?.kid, retired };
  }

  /** Grace keys beyond the newest `graceKeysMax` retired now (shared/token-keys.ts says why); their ids. */
  private async retireBeyondBound(client: Queryable, tenantId: string): Promise<string[]> {
    const { rows } = await client.query<{ kid: string }>(
      `UPDATE signing_keys SET state = 'retired', retired_at = now()
       WHERE tenant_id = $1 AND state = 'grace' AND kid NOT IN (
         SELECT kid FROM signing_keys WHERE tenant_id = $1 AND state = 'grace'
         ORDER BY created_at DESC, kid DESC LIMIT $2)
       RETURNING kid`,
      [tenantId, graceKeysMax],
    );
    return rows.map((r) => r.kid).sort();
  }

  private async retireExpired(client: Queryable, tenantId: string): Promise<void> {
    await client.query(
      `UPDATE signing_keys SET state = 'retired', retired_at = now()
       WHERE tenant_id = $1 AND state = 'grace' AND grace_until <= to_timestamp($2 / 1000.0)`,
      [tenantId, this.now()],
    );
  }

  /** Sign a JWT with the tenant's active key; `iat`, `exp`, `iss` and `kid` are set here. */
  async sign(
    tenantId: string,
    claims: JWTPayload & Record<string, unknown>,
    opts: { expiresInS: number; typ?: string; issuer?: string },
  ): Promise<string> {
    await this.ensureActive(tenantId);
    const signer = await this.signerOf(tenantId);
    if (!signer) throw new KeyError('NO_KEY', `tenant ${tenantId} has no active signing key`);
    const nowS = Math.floor(this.now() / 1000);
    return new SignJWT({ ...claims, tid: tenantId })
      .setProtectedHeader({ alg: 'EdDSA', kid: signer.kid, typ: opts.typ ?? 'JWT' })
      .setIssuer(opts.issuer ?? issuerFor(tenantId))
      .setIssuedAt(nowS)
      .setExpirationTime(nowS + opts.expiresInS)
      .sign(signer.key);
  }

  /** Envelope-encrypt another secret (e.g. a tenant's identity secret) with the master key. */
  sealSecret(plaintext: Buffer, aad: string): Buffer {
    return seal(this.masterKey, plaintext, `secret:${aad}`);
  }

  /** Open what `sealSecret` sealed with the same `aad`; throws if it was tampered with. */
  openSecret(sealed: Buffer, aad: string): Buffer {
    return open(this.masterKey, sealed, `secret:${aad}`);
  }
}
