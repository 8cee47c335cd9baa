/**
 * Issue 18 item 1: a transfer's Check reads no row to learn whether its request-bound step-up
 * was used. The edge loads the live used grants when its listener connects and keeps them by
 * the `stepup_used` notification (migration 0870); a lookup is then answered from memory.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Db } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('used request-bound step-ups on the edge', () => {
  let tdb: TestDb;
  let state: EdgeState;
  const queries: string[] = [];
  const use = (jti: string, key: string | null, expires = "now() + interval '10 minutes'") =>
    tdb.db.query(
      `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
     VALUES ('t1', $1, $2, $3, 'o', 'transfer.create', $4, now(), ${expires})`,
      [jti, randomUUID(), randomUUID(), key],
    );
  const eventually = async (jti: string, want: string | undefined) => {
    let got = await state.stepUpUse('t1', jti);
    for (let i = 0; i < 100 && got !== want; i++) {
      await new Promise((r) => setTimeout(r, 10));
      got = await state.stepUpUse('t1', jti);
    }
    return got;
  };

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('t1', 't1', 'KE', 'KES')`,
    );
    // Used before this edge started: known from the load at connect, not from a notification.
    await use('used-before-start', 'k-before-0001');
    await use('expired-before-start', null, "now() - interval '1 minute'");
    const db: Db = {
      ...tdb.db,
      pool: tdb.db.pool,
      query: (sql, params) => (queries.push(sql), tdb.db.query(sql, params)),
    };
    const keys = new KeyStore(tdb.db, randomBytes(32));
    state = new EdgeState(db, new TokenVerifier(tdb.db), keys.apiKeySecrets, createLogger('silent'));
    await state.start();
  });
  after(async () => {
    await state.stop();
    await tdb.drop();
  });

  it('knows a grant used before it started, and answers from memory', async () => {
    queries.length = 0;
    assert.equal(await state.stepUpUse('t1', 'used-before-start'), 'k-before-0001');
    assert.equal(await state.stepUpUse('t1', 'never-used'), undefined);
    assert.equal(
      await state.stepUpUse('t2', 'used-before-start'),
      undefined,
      "another tenant's grant id is another grant",
    );
    assert.deepEqual(
      queries.filter((q) => q.includes('stepup_uses')),
      [],
      'no row read per lookup',
    );
  });

  it('learns a use committed later by notification, with the key that used it', async () => {
    const jti = randomUUID();
    assert.equal(await state.stepUpUse('t1', jti), undefined);
    await use(jti, 'k-later-0002');
    assert.equal(await eventually(jti, 'k-later-0002'), 'k-later-0002');
    const keyless = randomUUID();
    await use(keyless, null);
    assert.equal(await eventually(keyless, ''), '', 'a use without an Idempotency-Key binds no retry');
  });

  it('a use rolled back is never announced', async () => {
    const jti = randomUUID();
    const client = await tdb.db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, idempotency_key, used_at, expires_at)
         VALUES ('t1', $1, $2, $3, 'o', 'transfer.create', NULL, now(), now() + interval '10 minutes')`,
        [jti, randomUUID(), randomUUID()],
      );
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    // A committed marker after it: once the marker is known, the rolled-back use would have been too.
    const marker = randomUUID();
    await use(marker, null);
    assert.equal(await eventually(marker, ''), '');
    assert.equal(await state.stepUpUse('t1', jti), undefined);
  });
});
