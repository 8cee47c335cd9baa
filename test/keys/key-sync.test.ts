/**
 * A core's reaction to NOTIFY `keys_changed` (core/keys/key-sync.ts) on a real PostgreSQL: text
 * that names no tenant drops every tenant's keys, folded into one drop per gap however many
 * arrive, and the last one is never lost; a tenant named during such a storm is dropped at once;
 * a flood of distinct tenant ids stays bounded.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import pg from 'pg';
import {
  allDropGapMs,
  KeySync,
  malformedWarnEveryMs,
  tenantDropGapMs,
  trackedTenantsMax,
} from '../../core/keys/key-sync.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { sleep, untilHolds } from '../helpers/listening.ts';
import { loggerInto } from '../helpers/log-lines.ts';

/** What a KeyStore was told to drop, and when: a tenant id, or undefined for every tenant. */
function recordingKeys() {
  const drops: { tenantId: string | undefined; at: number }[] = [];
  return {
    drops,
    keys: { invalidate: (tenantId?: string) => void drops.push({ tenantId, at: Date.now() }) },
    of: (tenantId: string | undefined) => drops.filter((d) => d.tenantId === tenantId),
  };
}

describe('a core told of key changes by NOTIFY keys_changed', () => {
  let tdb: TestDb;
  let sender: pg.Client;
  const syncs: KeySync[] = [];

  /** A KeySync listening (its first drop, of every tenant, done), recording what it drops. */
  async function listening(log = createLogger('silent'), tenantGapMs = tenantDropGapMs) {
    const r = recordingKeys();
    const s = new KeySync(tdb.db, log, r.keys, { reconnectEveryMs: 100, tenantDropGapMs: tenantGapMs });
    syncs.push(s);
    s.listen();
    await untilHolds(() => s.listening, 5_000, 'the key listener');
    assert.equal(r.of(undefined).length, 1, 'every tenant dropped once it listens');
    return { s, ...r };
  }
  const notify = (payload: string) => sender.query(`SELECT pg_notify('keys_changed', $1)`, [payload]);

  before(async () => {
    tdb = await freshDatabase();
    sender = new pg.Client({ connectionString: tdb.url });
    await sender.connect();
  });
  afterEach(async () => {
    for (const s of syncs.splice(0)) await s.close();
  });
  after(async () => {
    await sender.end();
    await tdb.drop();
  });

  it('folds a storm of payloads that name no tenant into one drop of every tenant per gap, the last one kept', async () => {
    const lines: string[] = [];
    const k = await listening(loggerInto(lines));
    await sleep(allDropGapMs);
    const secret = 'not-a-tenant secret text';
    const started = Date.now();
    let tenantAskedAt = 0;
    let lastSentAt = 0;
    // Each statement its own transaction, so PostgreSQL folds none of them.
    for (let i = 0; i < 400; i++) {
      lastSentAt = Date.now();
      await notify(i % 2 ? '' : `${secret} ${i}`);
      if (i === 200) {
        tenantAskedAt = Date.now();
        await notify('kc');
      }
    }
    const ended = Date.now();
    await sleep(allDropGapMs + 300);

    const all = k.of(undefined).slice(1);
    assert.ok(all.length >= 1, 'the storm dropped every tenant');
    assert.ok(
      all.length <= Math.ceil((ended - started) / allDropGapMs) + 2,
      `${all.length} drops of every tenant for 400 notifications over ${ended - started} ms`,
    );
    assert.ok((all.at(-1)?.at ?? 0) >= lastSentAt, 'the drop asked for last in the storm was applied');
    const kc = k.of('kc');
    assert.equal(kc.length, 1, 'the tenant named once is dropped once');
    assert.ok((kc[0]?.at ?? 0) - tenantAskedAt < allDropGapMs, 'and at once, not behind the storm');
    // Warned once per malformedWarnEveryMs, by length only.
    const warned = lines.filter((l) => l.includes('named no tenant'));
    assert.ok(malformedWarnEveryMs > ended - started);
    assert.equal(warned.length, 1, lines.join('\n'));
    assert.ok(!lines.some((l) => l.includes(secret)), 'the payload is not logged');
    assert.ok(k.s.listening, 'still listening');
  });

  it("folds a storm naming one tenant into one drop of its keys per gap, the last one kept, and spares the others'", async () => {
    const k = await listening();
    const started = Date.now();
    let lastSentAt = 0;
    for (let i = 0; i < 200; i++) {
      lastSentAt = Date.now();
      await notify('kc');
    }
    const ended = Date.now();
    await sleep(tenantDropGapMs + 200);
    const kc = k.of('kc');
    assert.ok(
      kc.length >= 1 && kc.length <= Math.ceil((ended - started) / tenantDropGapMs) + 2,
      `${kc.length} drops of kc for 200 notifications over ${ended - started} ms`,
    );
    assert.ok((kc.at(-1)?.at ?? 0) >= lastSentAt, 'the drop asked for last in the storm was applied');
    assert.equal(k.of(undefined).length, 1, 'no other tenant dropped');
  });

  it('drops every tenant once more distinct tenants than it tracks are named within a gap', async () => {
    // Every tenant named stays within its gap for this test (their delivery may take longer than 100 ms).
    const k = await listening(undefined, 60_000);
    await sleep(allDropGapMs);
    // Distinct payloads: one transaction delivers them all.
    await sender.query(`SELECT pg_notify('keys_changed', 't' || g) FROM generate_series(1, $1::int) g`, [
      trackedTenantsMax + 50,
    ]);
    await untilHolds(() => k.of(undefined).length >= 2, 5_000, 'every tenant dropped');
    const named = k.drops.filter((d) => d.tenantId !== undefined).length;
    assert.equal(named, trackedTenantsMax, 'tenants dropped one by one up to the bound');
    // The names past the bound were folded into one drop of every tenant, then one more at its gap's end.
    await untilHolds(() => k.of(undefined).length === 3, 5_000, 'the drop asked for within the gap');
  });
});
