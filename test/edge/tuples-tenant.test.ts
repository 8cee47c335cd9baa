/**
 * Tenant isolation of the edge's relationship tuples: a customer's or staff member's tuples are
 * read in the principal's own tenant only, even were a subject id to repeat in another tenant;
 * a change in either tenant reaches the cache by its notification.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { KeyStore } from '../../core/keys/keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { createLogger } from '../../shared/log.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe("the edge reads a subject's tuples in its own tenant", () => {
  let tdb: TestDb;
  let state: EdgeState;
  const subject = randomUUID();
  const tuple = (tenant: string, object: string) =>
    tdb.db.query(
      `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id, caveat)
       VALUES ($1, 'customer', $2, 'payer', 'customer', $3, '{}')`,
      [tenant, subject, object],
    );
  const objects = async (tenant: string) =>
    (await state.tuplesOf('customer', subject, tenant)).map((t) => t.object_id).sort();

  before(async () => {
    tdb = await freshDatabase();
    for (const t of ['ta', 'tb'])
      await tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [t],
      );
    state = new EdgeState(
      tdb.db,
      new TokenVerifier(tdb.db),
      new KeyStore(tdb.db, randomBytes(32)).apiKeySecrets,
      createLogger('silent'),
    );
    await state.start();
  });
  after(async () => {
    await state.stop();
    await tdb.drop();
  });

  it("answers tenant A's tuples only, and sees a new tuple of either tenant after its notification", async () => {
    const a1 = randomUUID();
    const b1 = randomUUID();
    await tuple('ta', a1);
    await tuple('tb', b1);
    assert.deepEqual(await objects('ta'), [a1]);
    assert.deepEqual(await objects('tb'), [b1]);
    const a2 = randomUUID();
    await tuple('ta', a2);
    let seen = await objects('ta');
    for (let i = 0; i < 100 && seen.length < 2; i++) {
      await new Promise((r) => setTimeout(r, 10));
      seen = await objects('ta');
    }
    assert.deepEqual(seen, [a1, a2].sort());
    assert.deepEqual(await objects('tb'), [b1]);
  });
});
