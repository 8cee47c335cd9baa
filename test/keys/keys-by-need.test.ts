/**
 * Keys by need (DESIGN "Modes, secrets and who holds them"): the edge verifies access tokens with
 * public keys only, signs step-up challenges with a key that mints nothing else, and opens API-key
 * secrets with a key of their own; core fetches a policy revision it never saw from the source.
 */
import assert from 'node:assert/strict';
import { createPrivateKey, randomBytes } from 'node:crypto';
import { cp, mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ApiKeys } from '../../core/apikeys/store.ts';
import { KeyStore, deriveApiKeySealKey } from '../../core/keys/keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { ApiKeySecrets } from '../../shared/api-key-secrets.ts';
import {
  ChallengeKeys,
  challengeAudience,
  challengeTyp,
  issueChallenge,
  verifyChallenge,
} from '../../shared/challenge.ts';
import { createLogger } from '../../shared/log.ts';
import { seal } from '../../shared/sealing.ts';
import { signDocument } from '../../shared/signing.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const log = createLogger('silent');

describe('keys by need', () => {
  let t: TestDb;
  let keys: KeyStore;
  const master = randomBytes(32);

  before(async () => {
    t = await freshDatabase();
    await t.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('ta', 'A', 'KE', 'KES'), ('tb', 'B', 'KE', 'KES')`,
    );
    keys = new KeyStore(t.db, master);
  });
  after(() => t.drop());

  it('verifies a tenant access token with public keys alone', async () => {
    const token = await keys.sign('ta', { sub: 'c1', aud: 'payments' }, { expiresInS: 300 });
    const claims = await new TokenVerifier(t.db).verify(token, { audience: 'payments' });
    assert.equal(claims.sub, 'c1');
    assert.equal(claims.tid, 'ta');
  });

  it('a challenge-key token is never an access token, and a token-key "challenge" is never a challenge', async () => {
    const challenge = await issueChallenge(keys.challenges, {
      tenantId: 'ta',
      sub: 'c1',
      orig: 'o',
      methods: ['otp'],
    });
    // Same audience the access-token check would ask for: still refused (HS256, not a tenant key).
    await assert.rejects(
      new TokenVerifier(t.db).verify(challenge, { audience: challengeAudience, typ: challengeTyp }),
      (e: { code?: string }) => e.code === 'UNKNOWN_KID',
    );
    const forged = await keys.sign(
      'ta',
      { kind: 'stepup', sub: 'c1', orig: 'o', methods: ['otp'], jti: 'j', aud: challengeAudience },
      { expiresInS: 300, typ: challengeTyp },
    );
    await assert.rejects(
      verifyChallenge(keys.challenges, forged, { tenantId: 'ta', sub: 'c1' }),
      (e: { code?: string }) => e.code === 'challenge_mismatch',
    );
  });

  it('a challenge verifies under the previous key during a rollout, and not under an unrelated key', async () => {
    const oldKey = randomBytes(32);
    const ch = await issueChallenge(new ChallengeKeys(oldKey), {
      tenantId: 'ta',
      sub: 'c1',
      orig: 'o',
      methods: ['otp'],
    });
    const rolled = new ChallengeKeys(randomBytes(32), [oldKey]);
    assert.equal((await verifyChallenge(rolled, ch, { tenantId: 'ta', sub: 'c1', orig: 'o' })).sub, 'c1');
    await assert.rejects(
      verifyChallenge(new ChallengeKeys(randomBytes(32)), ch, { tenantId: 'ta', sub: 'c1' }),
      (e: { code?: string }) => e.code === 'challenge_mismatch',
    );
    // Bound to its tenant: the same token presented for tenant B is refused.
    await assert.rejects(
      verifyChallenge(rolled, ch, { tenantId: 'tb', sub: 'c1' }),
      (e: { code?: string }) => e.code === 'challenge_mismatch',
    );
  });

  it('API-key secrets sealed with the master key cannot be judged at the edge until core re-seals them', async () => {
    const store = new ApiKeys(t.db, keys);
    const { key, secret } = await store.create('ta', 'test', {
      name: 'legacy',
      scopes: [],
      budget: {},
      ipAllowlist: [],
      expiresAt: undefined,
    });
    // As a key created before 0790 was stored: sealed with the master key, seal = 1.
    await t.db.query('UPDATE api_keys SET secret_enc = $2, seal = 1 WHERE id = $1', [
      key.id,
      seal(master, Buffer.from(secret), `secret:apikey:${key.id}`),
    ]);
    const edge = new EdgeState(
      t.db,
      new TokenVerifier(t.db),
      new ApiKeySecrets(deriveApiKeySealKey(master)),
      log,
    );
    await edge.start();
    after(() => edge.stop());
    // Not an unknown key (403 invalid_key): the lookup fails, and the request fails closed (503).
    await assert.rejects(edge.apiKey(key.id), /not yet re-sealed/);
    assert.equal(await store.resealLegacySecrets(), 1);
    const opened = await edge.apiKey(key.id);
    assert.equal(opened?.secret.toString(), secret);
    assert.equal(await store.resealLegacySecrets(), 0, 're-sealing is done once');
    // The master key does not open the re-sealed secret.
    const { rows } = await t.db.query<{ secret_enc: Buffer }>(
      'SELECT secret_enc FROM api_keys WHERE id = $1',
      [key.id],
    );
    assert.throws(() => keys.openSecret(rows[0]!.secret_enc, `apikey:${key.id}`));
  });
});

describe('policy revisions by ref', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bundle-source-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('a store that never saw a revision fetches it from the source and verifies it', async () => {
    await cp(defaultBundleDir, dir, { recursive: true });
    // A second signed revision of the same policy under another version, kept only in revisions/.
    const key = createPrivateKey({
      key: JSON.parse(
        await readFile(new URL('../../policy/keys/dev-signing.private.jwk', import.meta.url), 'utf8'),
      ) as import('node:crypto').JsonWebKey,
      format: 'jwk',
    });
    const manifest = JSON.parse(await readFile(join(defaultBundleDir, 'manifest.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    delete manifest.signature;
    const older = signDocument({ ...manifest, policy_version: 'older0000000001' }, key);
    const kept = join(dir, 'revisions', 'older0000000001');
    await mkdir(kept, { recursive: true });
    await cp(join(defaultBundleDir, 'policy.wasm'), join(kept, 'policy.wasm'));
    await cp(join(defaultBundleDir, 'registry.json'), join(kept, 'registry.json'));
    await cp(join(defaultBundleDir, 'routes.json'), join(kept, 'routes.json'));
    await writeFile(join(kept, 'manifest.json'), JSON.stringify(older));
    // A tampered revision (version differs from its directory) is not accepted under that name.
    const liar = join(dir, 'revisions', 'liar');
    await cp(kept, liar, { recursive: true });

    const store = new PolicyStore(await loadTrustedKeys());
    await store.load(dir);
    assert.equal(store.get('older0000000001'), undefined);
    const rev = await store.resolve('older0000000001');
    assert.equal(rev?.policyVersion, 'older0000000001');
    assert.equal(await store.resolve('liar'), undefined);
    assert.equal(await store.resolve('../dist'), undefined, 'a ref is a name, never a path');
    assert.equal(await store.resolve('missing'), undefined);
    // An unchanged manifest is not fetched and instantiated again: the poll returns the installed revision itself.
    const installed = store.current;
    assert.equal(await store.load(dir), installed);
    // A changed (re-signed) manifest is verified and loaded anew.
    await writeFile(
      join(dir, 'manifest.json'),
      JSON.stringify(signDocument({ ...manifest, policy_version: 'newer000000001' }, key)),
    );
    assert.equal((await store.load(dir)).policyVersion, 'newer000000001');
    assert.equal(store.current?.policyVersion, 'newer000000001');
  });
});
