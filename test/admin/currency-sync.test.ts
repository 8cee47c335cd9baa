/**
 * The ledger's currency snapshot follows admin's table (core/admin/reference/currency-sync.ts):
 * a change committed by any writer reaches it by NOTIFY `currencies_changed` (migration 1101);
 * a change announced while a reload runs is followed by one more reload; a reload that read the
 * table before this core's own write committed never puts the older value back; while the LISTEN
 * connection is down the periodic reload keeps it current, and its return reloads once; a failed
 * or unanswered reload keeps the last snapshot, says so without secrets, and is tried again.
 * Real PostgreSQL; the snapshot is this process's (core/ledger/currency.ts).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import pg from 'pg';
import {
  CurrencySync,
  type CurrencySyncOptions,
  currencyReloadGapMs,
} from '../../core/admin/reference/currency-sync.ts';
import {
  applyCommittedCurrency,
  applyLedgerCurrencies,
  type CurrencyRead,
  readLedgerCurrencies,
} from '../../core/admin/reference/currencies.ts';
import { minorUnitsOf, setCurrencies } from '../../core/ledger/currency.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { listenVia, sleep, untilHolds } from '../helpers/listening.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';
import { startAdmin, type AdminHarness } from './harness.ts';

/** Long enough that a test's change can only reach the snapshot by the path it tests. */
const never = 3_600_000;

/** A logger whose lines this test reads. */
function capturedLog() {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return { log: createLogger('info', sink), lines };
}

/**
 * The real read of the table, counting its calls and the SELECTs that answered; while `hold` is
 * set, a read waits on it between its SELECT and handing its rows to be applied.
 */
function countedLoad() {
  const c = { loads: 0, selected: 0, hold: undefined as Promise<void> | undefined };
  const read = async (q: Queryable): Promise<CurrencyRead> => {
    c.loads++;
    const rows = await readLedgerCurrencies(q);
    c.selected++;
    await c.hold;
    return rows;
  };
  return { c, read };
}

describe('the ledger currency snapshot follows admin_currencies', () => {
  let tdb: TestDb;
  const syncs: CurrencySync[] = [];
  const relays: Relay[] = [];

  const sync = (db: Db, opts: CurrencySyncOptions = {}, log = createLogger('silent')) => {
    const s = new CurrencySync(db, log, { reconnectEveryMs: 100, ...opts });
    syncs.push(s);
    return s;
  };
  const put = (code: string, minor: number) =>
    tdb.db.query(
      `INSERT INTO admin_currencies (code, name, minor_units) VALUES ($1, $1, $2)
         ON CONFLICT (code) DO UPDATE SET minor_units = EXCLUDED.minor_units`,
      [code, minor],
    );

  /** A sync that reloads only when told (no periodic reload), listening, its first load done. */
  const listening = async (read: (q: Queryable) => Promise<CurrencyRead>) => {
    const s = sync(tdb.db, { reloadEveryMs: never, read });
    s.start();
    s.listen();
    await untilHolds(() => s.listening, 5_000, 'the listener');
    await s.idle();
    return s;
  };

  before(async () => {
    tdb = await freshDatabase();
  });
  afterEach(async () => {
    for (const s of syncs.splice(0)) await s.close();
    for (const r of relays.splice(0)) await r.stop();
  });
  after(async () => {
    await tdb.drop();
  });

  it('reloads on a change committed by any writer, at its commit', async () => {
    const s = sync(tdb.db, { reloadEveryMs: never });
    s.start();
    s.listen();
    await untilHolds(() => s.listening, 5_000, 'the listener');
    await s.idle();
    assert.equal(minorUnitsOf('MUR'), undefined);

    await put('MUR', 3);
    await untilHolds(() => minorUnitsOf('MUR') === 3, 5_000, 'MUR added');
    await tdb.db.query(`UPDATE admin_currencies SET minor_units = 1 WHERE code = 'MUR'`);
    await untilHolds(() => minorUnitsOf('MUR') === 1, 5_000, 'MUR re-scaled');
    await tdb.db.query(`DELETE FROM admin_currencies WHERE code = 'MUR'`);
    await untilHolds(() => minorUnitsOf('MUR') === undefined, 5_000, 'MUR removed');

    // Announced at commit: a change not yet committed is not announced, and one rolled back never is.
    const c = new pg.Client({ connectionString: tdb.url });
    await c.connect();
    await c.query('BEGIN');
    await c.query(`INSERT INTO admin_currencies (code, name, minor_units) VALUES ('SCR', 'SCR', 2)`);
    await sleep(300);
    assert.equal(minorUnitsOf('SCR'), undefined, 'not announced before its commit');
    await c.query('COMMIT');
    await c.end();
    await untilHolds(() => minorUnitsOf('SCR') === 2, 5_000, 'SCR added at commit');
  });

  it('follows a reload that read the table before a change with one more reload', async () => {
    // The SELECT of the held load runs before the change commits; its snapshot is set after it.
    const { c, read } = countedLoad();
    let release = () => {};
    const s = await listening(read);
    const before = c.loads;

    c.hold = new Promise<void>((r) => {
      release = r;
    });
    s.reload();
    await untilHolds(() => c.selected === before + 1, 5_000, 'the held reload to read the table');
    await put('BND', 3);
    await untilHolds(() => s.queued, 5_000, 'the announcement while the reload runs');
    // Further asks while it still runs are the same one reload after it.
    s.reload();
    s.reload();
    release();
    await s.idle();
    assert.equal(minorUnitsOf('BND'), 3, 'the later reload read the change');
    assert.equal(c.loads, before + 2, 'one more reload after the held one');
  });

  it("never puts back what this core's own committed write applied: a reload that read the table before it reads it again", async () => {
    await put('WST', 2);
    // Not listening, no periodic reload: the write's NOTIFY brings no reload here, so only the
    // sync's own re-read can bring the snapshot back to the table.
    const { c, read } = countedLoad();
    const s = sync(tdb.db, { reloadEveryMs: never, read });
    s.start();
    await s.idle();
    assert.equal(minorUnitsOf('WST'), 2);
    const before = c.loads;
    let release = () => {};
    c.hold = new Promise<void>((r) => {
      release = r;
    });
    s.reload();
    await untilHolds(() => c.selected === before + 1, 5_000, 'the held reload to read the table');
    // This core's admin write commits after that SELECT, then applies itself (its afterCommit).
    await tdb.db.query(`UPDATE admin_currencies SET minor_units = 3 WHERE code = 'WST'`);
    applyCommittedCurrency('WST', 3);
    c.hold = undefined;
    release();
    await s.idle();
    assert.equal(minorUnitsOf('WST'), 3, 'the read from before the write did not put 2 back');
    assert.equal(c.loads, before + 2, 'the table was read once more, after the write');
  });

  it('folds a storm of notifications from any session into one reload per gap, and ends current', async () => {
    const { c, read } = countedLoad();
    const s = await listening(read);
    const before = c.loads;

    // Any session may NOTIFY the channel; each statement its own transaction, so none is folded.
    const storm = new pg.Client({ connectionString: tdb.url });
    await storm.connect();
    const started = Date.now();
    for (let i = 0; i < 400; i++) await storm.query(`SELECT pg_notify('currencies_changed', $1)`, [`${i}`]);
    await put('STM', 4);
    const stormMs = Date.now() - started;
    await storm.end();
    await untilHolds(() => minorUnitsOf('STM') === 4, 5_000, 'the change made at the end of the storm');
    await s.idle();
    const reloads = c.loads - before;
    // One per gap, and the first at once; not one per notification (each a SELECT of the table).
    assert.ok(
      reloads <= Math.ceil(stormMs / currencyReloadGapMs) + 2,
      `${reloads} reloads for 401 notifications over ${stormMs} ms`,
    );
  });

  it('while its listener is down, keeps the snapshot by the periodic reload, and reloads once when it is back', async () => {
    const relay = new Relay();
    relays.push(relay);
    const db = listenVia(tdb.db, await throughRelay(relay, tdb.url));
    const { log, lines } = capturedLog();

    // Down: the periodic reload (here every 200 ms) is what keeps the snapshot.
    const periodic = sync(db, { reloadEveryMs: 200 }, log);
    periodic.start();
    periodic.listen();
    await untilHolds(() => periodic.listening, 5_000, 'the listener');
    relay.refuse = true;
    relay.cutAll();
    await untilHolds(() => !periodic.listening, 5_000, 'the listener lost');
    assert.ok(
      lines.some((l) => l.includes('currency listener lost')),
      lines.join('\n'),
    );
    await put('LSL', 2);
    await untilHolds(() => minorUnitsOf('LSL') === 2, 5_000, 'LSL by the periodic reload');
    assert.equal(periodic.listening, false);
    await periodic.close();

    // Back: without a periodic reload, only the reload at reconnect can bring what it missed.
    const { c, read } = countedLoad();
    const back = sync(db, { reloadEveryMs: never, read });
    back.start();
    await back.idle();
    relay.refuse = false;
    back.listen();
    await untilHolds(() => back.listening, 5_000, 'the listener');
    await back.idle();
    const before = c.loads;
    relay.refuse = true;
    relay.cutAll();
    await untilHolds(() => !back.listening, 5_000, 'the listener lost');
    await put('LSL', 0);
    await sleep(300);
    assert.equal(minorUnitsOf('LSL'), 2, 'announced to no one: not reloaded yet');
    relay.refuse = false;
    await untilHolds(() => back.listening, 5_000, 'the listener back');
    await back.idle();
    assert.equal(minorUnitsOf('LSL'), 0, 'reloaded when it came back');
    assert.equal(c.loads, before + 1, 'once');
  });

  it('gives up a LISTEN the database does not answer and listens on another connection', async () => {
    const relay = new Relay();
    relays.push(relay);
    const db = listenVia(tdb.db, await throughRelay(relay, tdb.url));
    const { log, lines } = capturedLog();
    relay.silenceAtFirstQuery = true;
    const s = sync(db, { reloadEveryMs: never }, log);
    s.listen();
    await untilHolds(
      () => lines.some((l) => l.includes('currency listener could not connect')),
      10_000,
      'the silent attempt given up',
    );
    relay.silenceAtFirstQuery = false;
    await untilHolds(() => s.listening, 5_000, 'the listener on a connection that answers');
    await put('SLE', 2);
    await untilHolds(() => minorUnitsOf('SLE') === 2, 5_000, 'SLE announced');
  });

  it('keeps the last snapshot when a reload fails, says so at warn without secrets, and tries again', async () => {
    await put('KMF', 0);
    const { log, lines } = capturedLog();
    const url = new URL(tdb.url);
    url.password = 'not-the-password-Zq81';
    const wrong: Db = {
      ...tdb.db,
      pool: new pg.Pool({ connectionString: url.toString(), connectionTimeoutMillis: 2_000 }),
    };
    // Another process already changed the table: this one's snapshot stays what it was.
    setCurrencies([['KMF', 2]]);
    const s = sync(wrong, { reloadEveryMs: never, retryMs: 200 }, log);
    s.start();
    const failures = () =>
      lines
        .filter((l) => l.includes('reloading the ledger currencies failed'))
        .map((l) => JSON.parse(l) as { level: number; err: string; code?: string; retryInMs: number });
    await untilHolds(() => failures().length >= 3, 10_000, 'a failed reload and two retries');
    assert.equal(minorUnitsOf('KMF'), 2, 'the last snapshot stays');
    const [first] = failures();
    assert.equal(first?.level, 40);
    assert.match(first?.err ?? '', /password authentication failed/);
    assert.equal(first?.code, '28P01');
    assert.doesNotMatch(lines.join('\n'), /not-the-password-Zq81/);
    // Tried again after 200 ms, then 400, then 800: a database that keeps failing is asked less often.
    assert.deepEqual(
      failures()
        .slice(0, 3)
        .map((f) => f.retryInMs),
      [200, 400, 800],
    );
    await s.close();
    await wrong.pool.end();
  });

  it('gives up a reload the database does not answer and reloads again later; requests never wait for it', async () => {
    const relay = new Relay();
    relays.push(relay);
    const silentUrl = await throughRelay(relay, tdb.url);
    relay.silenceAtFirstQuery = true;
    const silent: Db = { ...tdb.db, pool: new pg.Pool({ connectionString: silentUrl, max: 2 }) };
    const { log, lines } = capturedLog();
    await put('GMD', 2);
    setCurrencies([['GMD', 1]]);
    const s = sync(silent, { reloadEveryMs: never, retryMs: 100, answerMs: 300 }, log);
    s.start();
    // The snapshot answers (synchronously: a request never waits for a reload) while its reload hangs.
    assert.equal(minorUnitsOf('GMD'), 1);
    await untilHolds(
      () => lines.some((l) => l.includes('Query read timeout')),
      5_000,
      'the unanswered reload given up',
    );
    relay.silenceAtFirstQuery = false;
    await untilHolds(() => minorUnitsOf('GMD') === 2, 5_000, 'a later reload');
    await s.close();
    await silent.pool.end();
  });
});

describe("a core's own currency writes count as local writes for its reloads", () => {
  let h: AdminHarness;
  const admin = (method: string, path: string, json?: unknown) =>
    h.as('admin')(method, path, {
      ...(json === undefined ? {} : { json }),
      headers: { 'idempotency-key': `local-${randomUUID()}`, 'if-match': '*' },
    });

  before(async () => {
    h = await startAdmin({ seed: false });
  });
  after(async () => {
    await h?.close();
  });

  it('a read of the table taken before an admin write through the API is not applied after it', async () => {
    const writes: [string, string, unknown?][] = [
      ['POST', '/v1/currencies', { code: 'TOP', minor_units: 2 }],
      ['PATCH', '/v1/currencies/TOP', { minor_units: 3 }],
      ['DELETE', '/v1/currencies/TOP'],
    ];
    for (const [method, path, json] of writes) {
      const before = await readLedgerCurrencies(h.tdb.db);
      const r = await admin(method, path, json);
      assert.ok(r.status < 300, `${method} ${path}: ${r.status} ${r.text}`);
      assert.equal(applyLedgerCurrencies(before), false, `${method}: the older read is dropped`);
      assert.equal(
        applyLedgerCurrencies(await readLedgerCurrencies(h.tdb.db)),
        true,
        'a read after it applies',
      );
    }
    assert.equal(minorUnitsOf('TOP'), undefined);
  });
});
