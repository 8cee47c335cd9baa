/**
 * NOTIFY `stepup_used` at the edge (edge/state/store.ts, migration 0870): each announces one use
 * of a request-bound step-up, sent at every transfer's commit (and any database session may send
 * one). It changes the used set only: it must not keep the edge from caching its other lookups
 * (sessions, tenants, ...), whose rows it changes nothing of.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { KeyStore } from '../../core/keys/keys.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { type NotifiedEdge, notifiedEdge, sessionReadsWhile } from '../helpers/edge-notify.ts';
import { sleep } from '../helpers/listening.ts';

describe('an edge told of step-up uses by NOTIFY stepup_used', () => {
  let tdb: TestDb;
  let edge: NotifiedEdge;

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('su1', 'su1', 'KE', 'KES')`,
    );
    const keys = new KeyStore(tdb.db, randomBytes(32));
    edge = await notifiedEdge(tdb, new TokenVerifier(tdb.db), keys.apiKeySecrets);
  });
  after(async () => {
    await edge?.stop();
    await tdb?.drop();
  });

  it('keeps caching what it reads through a stream of step-up uses, and learns each use', async () => {
    const expiresAtMs = Date.now() + 600_000;
    // Sessions first looked up during the stream, as a busy tenant's transfers use their step-ups.
    const { reads, sent } = await sessionReadsWhile(edge, 'su1', (i) =>
      edge.sender.query(`SELECT pg_notify('stepup_used', $1)`, [
        JSON.stringify({ tenantId: 'su1', grantJti: `g${i}`, idempotencyKey: null, expiresAtMs }),
      ]),
    );
    assert.ok(sent > 100, `${sent} uses announced`);
    assert.equal(reads, 10, 'each session read once, then cached for its 30 s');
    const last = `g${sent - 1}`;
    for (let i = 0; i < 100 && (await edge.state.stepUpUse('su1', last)) === undefined; i++) await sleep(20);
    assert.equal(await edge.state.stepUpUse('su1', last), '', 'the last use announced is known');
  });
});
