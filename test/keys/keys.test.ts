import assert from 'node:assert/strict';
import { createPrivateKey, randomBytes, type KeyObject } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SignJWT } from 'jose';
import { open } from '../../shared/sealing.ts';
import { KeyError, KeyStore, issuerFor } from '../../core/keys/keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('tenant signing keys', () => {
  let t: TestDb;
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const now = () => clock;
  const master = randomBytes(32);
  before(async () => {
    t = await freshDatabase();
    for (const id of ['ta', 'tb'])
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
  });
  after(() => t.drop());

  it('signs EdDSA tokens that verify with iss, aud and exp checked', async () => {
    const ks = new KeyStore(t.db, master, { now });
    const token = await ks.sign('ta', { sub: 'u1', aud: 'api' }, { expiresInS: 300 });
    const claims = await ks.verify(token, { audience: 'api' });
    assert.equal(claims.sub, 'u1');
    assert.equal(claims.tid, 'ta');
    assert.equal(claims.iss, issuerFor('ta'));
    await assert.rejects(ks.verify(token, { audience: 'other' }));
    clock += 301_000 + 5_000;
    await assert.rejects(ks.verify(token, { audience: 'api' }), /exp/);
  });

  it('stores private keys encrypted; another master key cannot use them', async () => {
    const { rows } = await t.db.query<{ private_enc: Buffer }>(
      `SELECT private_enc FROM signing_keys WHERE tenant_id = 'ta'`,
    );
    assert.ok(rows[0] && !rows[0].private_enc.includes(Buffer.from('PRIVATE')));
    const other = new KeyStore(t.db, randomBytes(32), { now });
    await assert.rejects(other.sign('ta', { sub: 'x', aud: 'api' }, { expiresInS: 60 }));
  });

  it('rotation: old key verifies during grace only, then is refused; JWKS follows', async () => {
    const ks = new KeyStore(t.db, master, { now });
    const old = await ks.sign('ta', { sub: 'u', aud: 'api' }, { expiresInS: 7200 });
    const { kid, previous } = await ks.rotate('ta', 600);
    assert.ok(previous && previous !== kid);
    assert.equal((await ks.jwks('ta')).keys.length, 2);
    assert.equal((await ks.verify(old, { audience: 'api' })).sub, 'u');
    const fresh = await ks.sign('ta', { sub: 'v', aud: 'api' }, { expiresInS: 60 });
    assert.equal((await import('jose')).decodeProtectedHeader(fresh).kid, kid);
    clock += 601_000;
    ks.invalidate();
    await assert.rejects(ks.verify(old, { audience: 'api' }), /unknown, retired/);
    assert.equal((await ks.jwks('ta')).keys.length, 1);
  });

  it('a token of tenant A never verifies as tenant B', async () => {
    const ks = new KeyStore(t.db, master, { now });
    const kidB = await ks.ensureActive('tb');
    const kidA = await ks.ensureActive('ta');
    // Tenant A's real private key, as someone holding A's key material would have it.
    const signerOf = async (tenant: string) => {
      const { rows } = await t.db.query<{ kid: string; private_enc: Buffer }>(
        `SELECT kid, private_enc FROM signing_keys WHERE tenant_id = $1 AND state = 'active'`,
        [tenant],
      );
      const row = rows[0];
      assert.ok(row, `tenant ${tenant} has an active key`);
      return createPrivateKey({ key: open(master, row.private_enc, row.kid), format: 'der', type: 'pkcs8' });
    };
    const keyA = await signerOf('ta');
    // A complete, well-formed tenant-B token: tid, iss, aud, iat, exp all B's.
    const tenantBToken = (kid: string, key: KeyObject) =>
      new SignJWT({ sub: 'u', aud: 'api', tid: 'tb' })
        .setProtectedHeader({ alg: 'EdDSA', kid, typ: 'JWT' })
        .setIssuer(issuerFor('tb'))
        .setIssuedAt(Math.floor(clock / 1000))
        .setExpirationTime(Math.floor(clock / 1000) + 60)
        .sign(key);
    // The construction is right: signed with B's own key it verifies as B.
    assert.equal(
      (await ks.verify(await tenantBToken(kidB, await signerOf('tb')), { audience: 'api' })).tid,
      'tb',
    );
    // Signed with A's key naming A's kid: A's key is not in B's key set.
    await assert.rejects(
      ks.verify(await tenantBToken(kidA, keyA), { audience: 'api' }),
      (err: unknown) => err instanceof KeyError && err.code === 'UNKNOWN_KID',
    );
    // Signed with A's key naming B's kid: B's key does not verify A's signature.
    await assert.rejects(
      ks.verify(await tenantBToken(kidB, keyA), { audience: 'api' }),
      (err: unknown) => (err as { code?: string }).code === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED',
    );
  });

  it('caps the grace window at 24 hours', async () => {
    const ks = new KeyStore(t.db, master, { now });
    await ks.rotate('tb', 7 * 24 * 3600);
    const { rows } = await t.db.query<{ s: string }>(
      `SELECT extract(epoch FROM grace_until - to_timestamp($1 / 1000.0))::int::text AS s FROM signing_keys WHERE tenant_id = 'tb' AND state = 'grace'`,
      [clock],
    );
    assert.equal(rows[0]?.s, String(24 * 3600));
  });
});
