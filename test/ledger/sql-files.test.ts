/**
 * The ledger's SQL in one place (issue 21 item 3): every ledger function and trigger of a migrated
 * database is defined by its own file in core/ledger/sql, as recorded when it was applied, and no
 * later migration redefines one. Also guarantees of those files no other test shows: the one
 * posting writer for every kind of posting, transaction history, fixed account identity.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { loadFunctionFiles, loadMigrations } from '../../core/db/migrate.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { ledgerTenant, transferCmd } from './tenant-db.ts';

/** The first migration written after the function files took over (every later one must leave them alone). */
const filesSince = '0960';

describe('ledger SQL files', () => {
  let t: TestDb;
  const tenant = 'sqlfiles-t';
  let funded = '';
  let payee = '';
  before(async () => {
    t = await freshDatabase();
    const open = await ledgerTenant(t.db, tenant);
    const settlement = await open('SETTLEMENT');
    funded = await open('WALLET_MAIN');
    payee = await open('WALLET_MAIN');
    const [r] = await apply([post(settlement, funded, '100.000000')]);
    assert.equal(r?.ok, true, JSON.stringify(r));
  });
  after(() => t.drop());

  const post = (from: string, to: string, amount: string) => transferCmd(tenant, from, to, amount);

  async function apply(cmds: unknown[]): Promise<{ ok: boolean; code?: string }[]> {
    const { rows } = await t.db.query<{ r: { ok: boolean; code?: string }[] }>(
      'SELECT ledger_apply($1::jsonb) AS r',
      [JSON.stringify(cmds)],
    );
    return rows[0]?.r ?? [];
  }

  async function history(txn: string): Promise<string[]> {
    const { rows } = await t.db.query<{ s: string }>(
      `SELECT coalesce(from_status, '-') || '>' || to_status AS s FROM ledger_transaction_history
        WHERE tenant_id = $1 AND transaction_id = $2 ORDER BY seq`,
      [tenant, txn],
    );
    return rows.map((r) => r.s);
  }

  async function available(account: string): Promise<bigint> {
    const { rows } = await t.db.query<{ micros: string }>(
      `SELECT ((credits_posted - debits_posted - pending_debits) * 1000000)::bigint::text AS micros
         FROM ledger_balances WHERE tenant_id = $1 AND account_id = $2`,
      [tenant, account],
    );
    const micros = rows[0]?.micros;
    assert.ok(micros !== undefined, `balance row of ${account}`);
    return BigInt(micros);
  }

  async function postingRow(id: string) {
    const { rows } = await t.db.query<Record<string, unknown>>(
      `SELECT p.kind, p.type_code, p.transaction_id::text, p.reverses_posting_id::text, p.hold_id::text, p.entry_count,
              o.payload->>'kind' AS event_kind, o.payload->>'hold_id' AS event_hold, o.payload->>'reverses_posting_id' AS event_reverses
         FROM ledger_postings p JOIN outbox o ON o.aggregate_id = p.id::text AND o.event = 'posting.created'
        WHERE p.tenant_id = $1 AND p.id = $2`,
      [tenant, id],
    );
    return rows[0];
  }

  it('every ledger function and trigger function in the database has its own file, applied as it reads now', async () => {
    const files = await loadFunctionFiles();
    const names = new Set(files.map((f) => f.name));
    const { rows: fns } = await t.db.query<{ proname: string }>(
      `SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND (p.proname LIKE 'ledger\\_%' OR p.proname = ANY ($1::text[]))`,
      [[...names]],
    );
    assert.ok(fns.length > 20, `the ledger's functions were found: ${fns.length}`);
    assert.deepEqual(
      fns.map((r) => r.proname).filter((n) => !names.has(n)),
      [],
      'ledger functions without a file',
    );
    assert.deepEqual(
      [...names].filter((n) => !fns.some((r) => r.proname === n)),
      [],
      'files that do not define the function they are named after',
    );
    const { rows: triggers } = await t.db.query<{ tgname: string; proname: string }>(
      `SELECT tg.tgname, p.proname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_proc p ON p.oid = tg.tgfoid
        WHERE NOT tg.tgisinternal AND c.relname LIKE 'ledger\\_%'`,
    );
    assert.ok(triggers.length > 10);
    assert.deepEqual(
      triggers.filter((r) => !names.has(r.proname)),
      [],
      'triggers on ledger tables whose function has no file',
    );
    const { rows: applied } = await t.db.query<{ name: string; checksum: string }>(
      'SELECT name, checksum FROM schema_functions ORDER BY name',
    );
    assert.deepEqual(
      applied,
      files.map((f) => ({ name: f.name, checksum: f.checksum })),
    );
    for (const f of files)
      assert.match(
        f.sql,
        /^-- [\s\S]*?\n-- Proved by: /,
        `${f.name}.sql says what it guarantees and which test proves it`,
      );
  });

  it(`no migration from ${filesSince} on defines or alters a function that has a file`, async () => {
    const names = new Set((await loadFunctionFiles()).map((f) => f.name));
    const later = (await loadMigrations()).filter((m) => m.version >= filesSince);
    const offending = later.flatMap((m) =>
      [...m.sql.matchAll(/\b(?:CREATE\s+(?:OR\s+REPLACE\s+)?|ALTER\s+)FUNCTION\s+([a-z_][a-z0-9_]*)/gi)]
        .map((x) => (x[1] ?? '').toLowerCase())
        .filter((n) => names.has(n))
        .map((n) => `${m.version}: ${n}`),
    );
    assert.deepEqual(offending, []);
    // The check can fail: the migrations before the files defined them.
    const before0960 = (await loadMigrations()).find((m) => m.version.startsWith('0102'));
    assert.match(before0960?.sql ?? '', /CREATE FUNCTION ledger_check_legs/);
  });

  function holdCmds(amount: string, capture: string) {
    const hold = {
      op: 'hold',
      tenant,
      id: randomUUID(),
      transaction_id: randomUUID(),
      type: 'TRANSFER',
      debit_account_id: funded,
      credit_account_id: payee,
      currency: 'KES',
      amount,
      description: 'held',
      metadata: { why: 'test' },
      expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    };
    const cap = {
      op: 'capture',
      tenant,
      hold_id: hold.id,
      amount: capture,
      id: randomUUID(),
      now: new Date().toISOString(),
    };
    return { hold, capture: cap };
  }

  it("a hold's transaction keeps its history: PENDING, then POSTED by the capture; a posting's starts POSTED", async () => {
    const p = post(funded, payee, '1.000000');
    const { hold, capture } = holdCmds('2.000000', '2.000000');
    assert.deepEqual(
      (await apply([p, hold, capture])).map((r) => r.ok || r.code),
      [true, true, true],
    );
    assert.deepEqual(await history(String(p.transaction_id)), ['->POSTED']);
    assert.deepEqual(await history(hold.transaction_id), ['->PENDING', 'PENDING>POSTED']);
  });

  it("one writer for every kind of posting: a reversal in its own REVERSAL transaction, a capture in its hold's", async () => {
    const before = await available(funded);
    const p = post(funded, payee, '5.000000');
    const reversal = {
      op: 'reverse',
      tenant,
      posting_id: p.id,
      id: randomUUID(),
      transaction_id: randomUUID(),
    };
    const { hold, capture } = holdCmds('7.000000', '4.000000');
    assert.deepEqual(
      (await apply([p, reversal, hold, capture])).map((r) => r.ok || r.code),
      [true, true, true, true],
    );
    assert.deepEqual(await postingRow(String(p.id)), {
      kind: 'posting',
      type_code: 'TRANSFER',
      transaction_id: p.transaction_id,
      reverses_posting_id: null,
      hold_id: null,
      entry_count: 2,
      event_kind: 'posting',
      event_hold: null,
      event_reverses: null,
    });
    assert.deepEqual(await postingRow(reversal.id), {
      kind: 'reversal',
      type_code: 'REVERSAL',
      transaction_id: reversal.transaction_id,
      reverses_posting_id: p.id,
      hold_id: null,
      entry_count: 2,
      event_kind: 'reversal',
      event_hold: null,
      event_reverses: p.id,
    });
    assert.deepEqual(await postingRow(capture.id), {
      kind: 'capture',
      type_code: 'TRANSFER',
      transaction_id: hold.transaction_id,
      reverses_posting_id: null,
      hold_id: hold.id,
      entry_count: 2,
      event_kind: 'capture',
      event_hold: hold.id,
      event_reverses: null,
    });
    assert.deepEqual(await history(reversal.transaction_id), ['->POSTED']);
    assert.deepEqual(await history(hold.transaction_id), ['->PENDING', 'PENDING>POSTED']);
    // Posting and reversal cancel out; the capture took 4.00 of the 7.00 held, the rest released.
    assert.equal(await available(funded), before - 4_000_000n);
  });

  it("an account's tenant, id and currency never change", async () => {
    await assert.rejects(
      t.db.query(`UPDATE ledger_accounts SET currency = 'USD' WHERE tenant_id = $1 AND id = $2`, [
        tenant,
        payee,
      ]),
      /never change/,
    );
    await assert.rejects(
      t.db.query(`UPDATE ledger_accounts SET id = gen_random_uuid() WHERE tenant_id = $1 AND id = $2`, [
        tenant,
        payee,
      ]),
      /never change/,
    );
  });
});
