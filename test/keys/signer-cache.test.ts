/**
 * The signer cache (core/keys/keys.ts) against a rotation announced while it reads the active key:
 * a read an invalidation overtook (NOTIFY keys_changed, core/keys/key-sync.ts) is not kept, so the
 * next token is signed with the key the invalidation announced, not with the replaced one for the
 * cache's 60 s.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeProtectedHeader } from 'jose';
import { KeyStore } from '../../core/keys/keys.ts';
import type { Db } from '../../shared/db/pool.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { untilHolds } from '../helpers/listening.ts';

describe("a core's signer cache against a rotation announced while it reads", () => {
  let tdb: TestDb;
  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('kc', 'kc', 'KE', 'KES')`,
    );
  });
  after(() => tdb.drop());

  it('does not keep an active key read before the rotation the invalidation announced', async () => {
    const master = randomBytes(32);
    const a = new KeyStore(tdb.db, master);
    await a.ensureActive('kc');
    // B's next read of the active key answers what the table held when it ran, once released.
    let release: (() => void) | undefined;
    let hold = true;
    const held: Db = {
      ...tdb.db,
      query: async (sql, params) => {
        const r = await tdb.db.query(sql, params);
        if (hold && sql.includes('private_enc')) {
          hold = false;
          await new Promise<void>((resolve) => (release = resolve));
        }
        return r;
      },
    } as Db;
    const b = new KeyStore(held, master);
    const claims = { sub: 'client', aud: 'payments-core' };
    const signing = b.sign('kc', claims, { expiresInS: 60 });
    await untilHolds(() => release !== undefined, 5_000, 'the held read');

    const { kid } = await a.rotate('kc', 600);
    b.invalidate('kc'); // what B does when the rotation's NOTIFY arrives
    release?.();
    await signing; // the read under way answers the token waiting for it
    const next = await b.sign('kc', claims, { expiresInS: 60 });
    assert.equal(decodeProtectedHeader(next).kid, kid, 'signed with the key the invalidation announced');
  });
});
