/**
 * The verifier's cache of tenant key sets against keys made while it holds one: a set read while
 * an invalidation (NOTIFY keys_changed) happened is not kept, and a token naming a key the cached
 * set lacks re-reads the set once it is a second old (a key whose NOTIFY was missed), so a good
 * token signed with a new key is not refused as invalid_token for the cache's 60 s.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { SignJWT } from 'jose';
import type { Db } from '../../shared/db/pool.ts';
import { issuerFor, KeyError, TokenVerifier, unknownKidReloadMs } from '../../shared/token-keys.ts';

function newKey(n: number) {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const kid = `demo-00112233445566${String(n).padStart(2, '0')}`;
  const row = { kid, public_jwk: publicKey.export({ format: 'jwk' }), state: 'active', grace_until: null };
  return { kid, privateKey, row };
}

const tokenOf = (k: ReturnType<typeof newKey>) =>
  new SignJWT({ tid: 'demo', sub: randomUUID(), sid: randomUUID(), aal: 1, amr: ['pin'] })
    .setProtectedHeader({ alg: 'EdDSA', kid: k.kid, typ: 'at+jwt' })
    .setIssuer(issuerFor('demo'))
    .setAudience('payments-api')
    .setIssuedAt()
    .setExpirationTime('10m')
    .sign(k.privateKey);

const opts = { audience: 'payments-api', typ: 'at+jwt' };

describe('the token verifier keeps no key set older than the keys it was told about', () => {
  it('a key set read while an invalidation happened is used once and not cached', async () => {
    const old = newKey(1);
    const made = newKey(2);
    const table = [old.row];
    // The first read answers what the table held when it started, after the key was made and
    // announced: the read raced the NOTIFY.
    let hold: (() => void) | undefined;
    let reads = 0;
    const db = {
      query: async () => {
        reads++;
        const snapshot = [...table];
        if (reads === 1) await new Promise<void>((r) => (hold = r));
        return { rows: snapshot };
      },
    } as unknown as Db;
    const now = 1_000_000;
    const verifier = new TokenVerifier(db, { now: () => now });
    const first = verifier.verify(await tokenOf(old), opts);
    while (!hold) await new Promise((r) => setImmediate(r));
    table.push(made.row);
    verifier.invalidate('demo');
    hold();
    assert.equal((await first).tid, 'demo');
    // Within the same second (no unknown-kid re-read yet): the new key is found because the stale
    // set was not kept.
    assert.equal((await verifier.verify(await tokenOf(made), opts)).tid, 'demo');
    assert.equal(reads, 2);
  });

  it('a token of a key the cached set lacks re-reads it once the set is a second old, not before', async () => {
    const old = newKey(3);
    const made = newKey(4);
    const table = [old.row];
    let reads = 0;
    const db = {
      query: async () => {
        reads++;
        return { rows: [...table] };
      },
    } as unknown as Db;
    let now = 2_000_000;
    const verifier = new TokenVerifier(db, { now: () => now });
    assert.equal((await verifier.verify(await tokenOf(old), opts)).tid, 'demo');
    // A key made without a NOTIFY reaching this process.
    table.push(made.row);
    const fresh = await tokenOf(made);
    now += unknownKidReloadMs - 1;
    await assert.rejects(verifier.verify(fresh, opts), (e) => e instanceof KeyError);
    assert.equal(reads, 1, 'a set younger than the interval is not re-read for an unknown key');
    now += 1;
    assert.equal((await verifier.verify(fresh, opts)).tid, 'demo');
    assert.equal(reads, 2);
    // Forged key ids: at most one read per interval.
    const forged = await tokenOf({ ...newKey(5), kid: 'demo-ffffffffffffffff' });
    for (let i = 0; i < 5; i++)
      await assert.rejects(verifier.verify(forged, opts), (e) => e instanceof KeyError);
    assert.equal(reads, 2);
    now += unknownKidReloadMs;
    await assert.rejects(verifier.verify(forged, opts), (e) => e instanceof KeyError);
    assert.equal(reads, 3);
  });
});
