/**
 * The edge's reaction to NOTIFY `keys_changed` (edge/state/store.ts through shared/key-drops.ts,
 * as every core's): any database session may NOTIFY the channel, and a payload that names no
 * tenant drops every tenant's key set. A storm of them must cost each tenant one read of its key
 * set per gap, not one per notification for every tenant whose tokens the edge checks (each read
 * a query on the edge's pool, on the way of a Check with a 100 ms budget); the last drop asked for
 * is still applied, and a tenant named during the storm is dropped at once. Nor may such a storm
 * keep the edge from caching its other lookups (sessions, tenants, ...), which it changes nothing of.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { KeyStore } from '../../core/keys/keys.ts';
import type { Db } from '../../shared/db/pool.ts';
import { allDropGapMs, tenantDropGapMs } from '../../shared/key-drops.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { type NotifiedEdge, notifiedEdge, sessionReadsWhile } from '../helpers/edge-notify.ts';
import { sleep } from '../helpers/listening.ts';

const tenants = Array.from({ length: 10 }, (_, i) => `ks${i}`);

/** The edge's verifier, recording what it is told to drop and counting its reads of key sets. */
class RecordingVerifier extends TokenVerifier {
  readonly drops: { tenantId: string | undefined; at: number }[] = [];
  keySetReads = 0;
  constructor(db: Db) {
    super({
      ...db,
      query: ((text: string, params?: unknown[]) => {
        if (text.includes('signing_keys')) this.keySetReads++;
        return db.query(text, params);
      }) as Db['query'],
    });
  }
  override invalidate(tenantId?: string): void {
    this.drops.push({ tenantId, at: Date.now() });
    super.invalidate(tenantId);
  }
  of(tenantId: string | undefined) {
    return this.drops.filter((d) => d.tenantId === tenantId);
  }
}

describe('an edge told of key changes by NOTIFY keys_changed', () => {
  let tdb: TestDb;
  let edge: NotifiedEdge;
  let sender: pg.Client;
  let verifier: RecordingVerifier;
  const tokens: string[] = [];

  before(async () => {
    tdb = await freshDatabase();
    const keys = new KeyStore(tdb.db, randomBytes(32));
    for (const t of tenants) {
      await tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [t],
      );
      tokens.push(await keys.sign(t, { sub: 'u', aud: 'api' }, { expiresInS: 600 }));
    }
    verifier = new RecordingVerifier(tdb.db);
    edge = await notifiedEdge(tdb, verifier, keys.apiKeySecrets);
    ({ sender } = edge);
  });
  after(async () => {
    await edge?.stop();
    await tdb?.drop();
  });

  it('folds a storm naming no tenant into one read of each key set per gap, the last drop kept, a tenant named dropped at once', async () => {
    // Checks keep arriving for every tenant: each verifies its token (reading its set when dropped).
    let checking = true;
    const checks = (async () => {
      while (checking) {
        for (const t of tokens) await verifier.verify(t, { audience: 'api' });
        await sleep(1);
      }
    })();
    await sleep(allDropGapMs);
    const readsBefore = verifier.keySetReads;
    const allBefore = verifier.of(undefined).length;
    const started = Date.now();
    let lastSentAt = 0;
    let namedAt = 0;
    // Each statement its own transaction, so PostgreSQL folds none of them.
    for (let i = 0; i < 400; i++) {
      lastSentAt = Date.now();
      await sender.query(`SELECT pg_notify('keys_changed', $1)`, [i % 2 ? '' : `no tenant ${i}`]);
      if (i === 200) {
        namedAt = Date.now();
        await sender.query(`SELECT pg_notify('keys_changed', 'ks3')`);
      }
    }
    const ended = Date.now();
    await sleep(allDropGapMs + 300);
    checking = false;
    await checks;

    const gaps = Math.ceil((ended - started) / allDropGapMs) + 2;
    const all = verifier.of(undefined).slice(allBefore);
    assert.ok(
      all.length >= 1 && all.length <= gaps,
      `${all.length} drops of every tenant in ${ended - started} ms`,
    );
    assert.ok((all.at(-1)?.at ?? 0) >= lastSentAt, 'the drop asked for last in the storm was applied');
    const reads = verifier.keySetReads - readsBefore;
    assert.ok(
      reads <= (gaps + 1) * tenants.length,
      `${reads} key-set reads for ${tenants.length} tenants over ${ended - started} ms`,
    );
    const named = verifier.of('ks3');
    assert.equal(named.length, 1, 'the tenant named once is dropped once');
    assert.ok((named[0]?.at ?? 0) - namedAt < allDropGapMs, 'and at once, not behind the storm');
  });

  it("folds a storm naming one tenant into one drop per gap, the last one kept, the others' sets untouched", async () => {
    const before = verifier.drops.length;
    const started = Date.now();
    let lastSentAt = 0;
    for (let i = 0; i < 200; i++) {
      lastSentAt = Date.now();
      await sender.query(`SELECT pg_notify('keys_changed', 'ks5')`);
    }
    const ended = Date.now();
    await sleep(tenantDropGapMs + 200);
    const drops = verifier.drops.slice(before);
    assert.ok(
      drops.every((d) => d.tenantId === 'ks5'),
      'no other tenant dropped',
    );
    assert.ok(
      drops.length >= 1 && drops.length <= Math.ceil((ended - started) / tenantDropGapMs) + 2,
      `${drops.length} drops of ks5 for 200 notifications over ${ended - started} ms`,
    );
    assert.ok((drops.at(-1)?.at ?? 0) >= lastSentAt, 'the drop asked for last in the storm was applied');
  });

  it('keeps caching what it reads through a storm of key changes (they drop key sets only)', async () => {
    // Sessions first looked up during the storm.
    const { reads } = await sessionReadsWhile(edge, 'ks0', (i) =>
      sender.query(`SELECT pg_notify('keys_changed', $1)`, [tenants[i % tenants.length] as string]),
    );
    assert.equal(reads, 10, 'each session read once, then cached for its 30 s');
  });
});
