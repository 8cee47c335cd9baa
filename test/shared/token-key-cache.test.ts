/**
 * The verifier's cache of tenant key sets against keys made while it holds one: a set read while
 * an invalidation (NOTIFY keys_changed) happened is not kept, and a token naming a key the cached
 * set lacks re-reads the set once it is a second old (a key whose NOTIFY was missed), so a good
 * token signed with a new key is not refused as invalid_token for the cache's 60 s. Tokens that
 * miss the cache while a set is read share that read; an invalidation spares other tenants' reads;
 * a re-read that fails leaves the cached set serving good tokens.
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

/**
 * A signing_keys table whose read number `heldRead` answers what the table held when it began,
 * once released.
 */
function keyTable(rows: object[], heldRead: number) {
  let reads = 0;
  let release: (() => void) | undefined;
  const db = {
    query: async () => {
      reads++;
      const snapshot = [...rows];
      if (reads === heldRead) await new Promise<void>((r) => (release = r));
      return { rows: snapshot };
    },
  } as unknown as Db;
  return {
    db,
    reads: () => reads,
    /** Once the held read has begun: the function that lets it answer. */
    async held(): Promise<() => void> {
      while (!release) await new Promise((r) => setImmediate(r));
      return release;
    },
  };
}

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

  it('tokens arriving while a key set is re-read share that one read (forged key ids, good tokens)', async () => {
    const good = newKey(6);
    const table = keyTable([good.row], 2);
    let now = 3_000_000;
    const verifier = new TokenVerifier(table.db, { now: () => now });
    assert.equal((await verifier.verify(await tokenOf(good), opts)).tid, 'demo');
    now += unknownKidReloadMs;
    const forged = await tokenOf({ ...newKey(7), kid: 'demo-ffffffffffffffff' });
    // The first forged key id re-reads the set; 20 forged and 20 good tokens arrive meanwhile.
    const first = assert.rejects(verifier.verify(forged, opts), (e) => e instanceof KeyError);
    const release = await table.held();
    const goods = await Promise.all(Array.from({ length: 20 }, () => tokenOf(good)));
    const during = [
      ...Array.from({ length: 20 }, () =>
        assert.rejects(verifier.verify(forged, opts), (e) => e instanceof KeyError),
      ),
      ...goods.map(async (t) => assert.equal((await verifier.verify(t, opts)).tid, 'demo')),
    ];
    await new Promise((r) => setImmediate(r));
    release();
    await Promise.all([first, ...during]);
    assert.equal(table.reads(), 2, 'one re-read for the lot');
  });

  it("an invalidation of another tenant's keys keeps a read under way", async () => {
    const good = newKey(8);
    const table = keyTable([good.row], 1);
    const verifier = new TokenVerifier(table.db, { now: () => 4_000_000 });
    const first = verifier.verify(await tokenOf(good), opts);
    const release = await table.held();
    // NOTIFY keys_changed naming other tenants (any session may send it, a rotation sends it).
    for (let i = 0; i < 10; i++) verifier.invalidate(`other-${i}`);
    release();
    assert.equal((await first).tid, 'demo');
    assert.equal((await verifier.verify(await tokenOf(good), opts)).tid, 'demo');
    assert.equal(table.reads(), 1, "demo's set was kept");
  });

  it('a token read after an invalidation does not use the read under way before it (a retired key)', async () => {
    const retired = newKey(9);
    const rows = [retired.row];
    const table = keyTable(rows, 1);
    const verifier = new TokenVerifier(table.db, { now: () => 5_000_000 });
    const token = await tokenOf(retired);
    const first = verifier.verify(token, opts);
    const release = await table.held();
    rows.length = 0;
    verifier.invalidate('demo');
    const second = assert.rejects(verifier.verify(token, opts), (e) => e instanceof KeyError);
    release();
    assert.equal((await first).tid, 'demo', 'the call that read before the retirement answers with it');
    await second;
    assert.equal(table.reads(), 2);
  });

  it('a re-read that fails keeps the cached set for good tokens and is not retried within the interval', async () => {
    const good = newKey(10);
    let reads = 0;
    const down = { now: false };
    const failure = new Error('timeout exceeded when trying to connect');
    const db = {
      query: async () => {
        reads++;
        if (down.now) throw failure;
        return { rows: [good.row] };
      },
    } as unknown as Db;
    let now = 6_000_000;
    const verifier = new TokenVerifier(db, { now: () => now });
    assert.equal((await verifier.verify(await tokenOf(good), opts)).tid, 'demo');
    now += unknownKidReloadMs;
    down.now = true;
    const forged = await tokenOf({ ...newKey(11), kid: 'demo-ffffffffffffffff' });
    // The re-read's failure is the service's (503), not the token's.
    await assert.rejects(verifier.verify(forged, opts), (e) => e === failure);
    for (let i = 0; i < 5; i++)
      await assert.rejects(verifier.verify(forged, opts), (e) => e instanceof KeyError);
    assert.equal((await verifier.verify(await tokenOf(good), opts)).tid, 'demo');
    assert.equal(reads, 2, 'one failed re-read, then the cached set');
    now += unknownKidReloadMs;
    down.now = false;
    await assert.rejects(verifier.verify(forged, opts), (e) => e instanceof KeyError);
    assert.equal(reads, 3);
  });
});
