import assert from 'node:assert/strict';
import { openAccount } from '../../core/ledger/accounts.ts';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import type { TestDb } from '../helpers/db.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/**
 * Attacks through the dev gateway on issue 21 item 2's "one implementation per job": the one
 * cursor codec (tampered, truncated, re-encoded, another customer's, another list's or another
 * filter's cursor; odd `limit`s), the one idempotent write frame (one key raced, one key reused
 * by another customer, one key reused with another query on an administration write) and the
 * ledger's command API (a confirm raced under one key, a reversal of an id that is not an agent
 * transaction). Whatever is tried: a coded 4xx, never a 500, money moved at most once, and every
 * posting balanced in `ledger_entries`.
 */
describe('attacks on the cursor codec, the idempotent write frame and the ledger command API', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let j: Journey;
  let tokens: Record<'admin' | 'ops', string>;
  let alice: Customer;
  let bob: Customer;
  let aliceToBob = '';

  const refused = (r: Res, code: string, what: string) => {
    assert.ok(r.status >= 400 && r.status < 500, `${what}: ${r.status} ${r.text}`);
    assert.equal(r.json?.code, code, `${what}: ${r.text}`);
  };
  const staff = (
    who: 'admin' | 'ops',
    method: string,
    path: string,
    o: { json?: unknown; key?: string; headers?: Record<string, string> } = {},
  ) =>
    call(gw, method, path, {
      ...(o.json === undefined ? {} : { json: o.json }),
      headers: {
        authorization: `Bearer ${tokens[who]}`,
        'x-request-id': randomUUID(),
        ...(o.key ? { 'idempotency-key': o.key } : {}),
        ...o.headers,
      },
    });
  const history = (c: Customer, query: string) =>
    call(gw, 'GET', `/v1/transactions${query}`, { headers: j.bearer(c) });
  /** A transfer from alice to bob, created (stepped up) and not yet confirmed. */
  const pending = async (amount: string) => {
    const t = await j.transfer(alice, aliceToBob, amount);
    assert.equal(t.final.status, 200, t.final.text);
    return { id: t.final.json.id as string, token: t.token };
  };
  const confirm = (c: Customer, token: string, transferId: string, key: string) =>
    call(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId },
      headers: { ...j.bearer(c, token), 'idempotency-key': key },
    });
  /** Postings whose debits and credits differ (none, ever). */
  const unbalanced = async () =>
    (
      await tdb.db.query(
        `SELECT posting_id FROM ledger_entries GROUP BY posting_id
          HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0`,
      )
    ).rows;

  before(async () => {
    e2e = await startE2eStack('atkone');
    ({ tdb, gw } = e2e);
    const demo = e2e.demo as Demo & { serviceTokens: Record<'admin' | 'ops', { token: string }> };
    tokens = { admin: demo.serviceTokens.admin.token, ops: demo.serviceTokens.ops.token };
    j = journey(gw, e2e.dataDir, tdb.db, demo);
    alice = await j.signUp('+254711520001');
    bob = await j.signUp('+254711520002');
    aliceToBob = (await j.addPayee(alice, bob.phone, 'Bob')).json.id;
    await j.fund(alice.wallet, '1000.00');
  });
  after(() => e2e?.stop());

  it('answers CURSOR_INVALID to every cursor it did not hand this customer for this list and filter', async () => {
    for (const amount of ['1.00', '2.00', '3.00']) await pending(amount);
    const first = await history(alice, '?limit=1');
    assert.equal(first.status, 200, first.text);
    const cursor = first.json.next_cursor as string;
    assert.match(cursor, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    const second = await history(alice, `?limit=1&cursor=${cursor}`);
    assert.equal(second.status, 200, second.text);
    assert.notEqual(second.json.items[0].id, first.json.items[0].id);

    const [payload, mac] = cursor.split('.') as [string, string];
    const flip = (s: string, i: number) => `${s.slice(0, i)}${s[i] === 'A' ? 'B' : 'A'}${s.slice(i + 1)}`;
    const payloadOf = (key: unknown) => Buffer.from(JSON.stringify(key)).toString('base64url');
    const decoded = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as [string, string];
    const forged: [string, string][] = [
      ['a flipped payload byte', `${flip(payload, 3)}.${mac}`],
      ['a flipped MAC byte', `${payload}.${flip(mac, 2)}`],
      ['a truncated MAC', `${payload}.${mac.slice(0, -2)}`],
      ['no MAC', payload],
      ['a third part', `${cursor}.x`],
      ['padded base64', `${payload}.${Buffer.from(mac, 'base64url').toString('base64')}`],
      ['an edited sort key, old MAC', `${payloadOf([decoded[0], randomUUID()])}.${mac}`],
      [
        'a sort key far in the future, old MAC',
        `${payloadOf(['2999-01-01T00:00:00.000Z', decoded[1]])}.${mac}`,
      ],
    ];
    for (const [what, c] of forged)
      refused(await history(alice, `?limit=1&cursor=${encodeURIComponent(c)}`), 'CURSOR_INVALID', what);
    refused(await history(bob, `?limit=1&cursor=${cursor}`), 'CURSOR_INVALID', "alice's cursor used by bob");
    refused(
      await history(alice, `?limit=1&direction=out&cursor=${cursor}`),
      'CURSOR_INVALID',
      'another filter',
    );
    const ops = await staff('ops', 'GET', '/v1/idempotency?limit=1');
    assert.equal(ops.status, 200, ops.text);
    assert.ok(ops.json.next_cursor, ops.text);
    refused(
      await history(alice, `?cursor=${ops.json.next_cursor}`),
      'CURSOR_INVALID',
      "another list's cursor (same arity)",
    );
    refused(
      await staff('ops', 'GET', `/v1/idempotency?cursor=${cursor}`),
      'CURSOR_INVALID',
      "a customer's cursor on an administration list",
    );
    refused(await history(alice, `?cursor=${'A'.repeat(600)}.${mac}`), 'VALIDATION_FAILED', 'a huge cursor');
  });

  it('refuses page sizes outside 1..100 with a code, never a 500 or a page of everything', async () => {
    for (const limit of [
      '0',
      '-1',
      '1000000000',
      'abc',
      '99999999999999999999',
      '1e3',
      '1.5',
      '0x10',
      '%205',
      '01',
    ])
      refused(await history(alice, `?limit=${limit}`), 'VALIDATION_FAILED', `limit=${limit}`);
    // A parameter given twice is refused by name rather than one of its values taken silently.
    refused(await history(alice, '?limit=1&limit=2'), 'VALIDATION_FAILED', 'limit twice');
    const plain = await history(alice, '?limit=2');
    assert.equal(plain.status, 200, plain.text);
    assert.ok(plain.json.items.length <= 2);
  });

  it('moves money once when one confirm is sent twice at once under one key, and both answers agree', async () => {
    const t = await pending('5.00');
    const before = await j.balance(bob.wallet);
    const key = `cf-${randomUUID()}`;
    const [a, b] = await Promise.all([
      confirm(alice, t.token, t.id, key),
      confirm(alice, t.token, t.id, key),
    ]);
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    assert.deepEqual(a.json, b.json);
    assert.equal([a, b].filter((r) => r.headers['idempotent-replayed'] === 'true').length, 1);
    assert.equal([a, b].find((r) => r.headers['idempotent-replayed'])?.headers['cache-control'], 'no-store');
    assert.equal(await j.balance(bob.wallet), before + 5_000_000n);
    assert.deepEqual(await unbalanced(), []);
  });

  it("never replays alice's answer to bob, who reuses her key and body", async () => {
    const t = await pending('6.00');
    const key = `cf-${randomUUID()}`;
    const a = await confirm(alice, t.token, t.id, key);
    assert.equal(a.status, 200, a.text);
    const stepped = await j.withStepUp(
      bob,
      'POST',
      '/v1/transfers/confirm',
      { transferId: t.id },
      { 'idempotency-key': key },
      'device',
    );
    refused(stepped.final, 'TRANSFER_NOT_FOUND', "bob with alice's key");
    assert.equal(stepped.final.headers['idempotent-replayed'], undefined);
    // Alice's own replay after bob's attempt is still hers.
    const again = await confirm(alice, t.token, t.id, key);
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.deepEqual(again.json, a.json);
  });

  it('never answers an administration write with the stored answer of the same key and another query', async () => {
    const flagKey = `flag-${randomUUID()}`;
    const put = await staff('admin', 'PUT', '/v1/flags/atk-one-flag', {
      json: { enabled: true },
      key: flagKey,
    });
    assert.equal(put.status, 200, put.text);
    const listed = await staff('ops', 'GET', `/v1/idempotency?key=${flagKey}`);
    assert.equal(listed.status, 200, listed.text);
    const principal = listed.json.items[0]?.principal as string;
    assert.ok(principal, listed.text);
    const purgeKey = `purge-${randomUUID()}`;
    const purged = await staff(
      'ops',
      'DELETE',
      `/v1/idempotency/${flagKey}?principal=${encodeURIComponent(principal)}`,
      {
        key: purgeKey,
      },
    );
    assert.equal(purged.status, 204, purged.text);
    // The same purge key naming another principal is another request: 409, not the 204 of the first.
    const other = await staff('ops', 'DELETE', `/v1/idempotency/${flagKey}?principal=staff:nobody`, {
      key: purgeKey,
    });
    refused(other, 'IDEMPOTENCY_CONFLICT', 'same key, another ?principal=');
    assert.equal(other.headers['idempotent-replayed'], undefined);
    const replay = await staff(
      'ops',
      'DELETE',
      `/v1/idempotency/${flagKey}?principal=${encodeURIComponent(principal)}`,
      {
        key: purgeKey,
      },
    );
    assert.equal(replay.status, 204, replay.text);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
  });

  it("lets no other tenant's Admin change the platform's tables (currencies, countries, GLOBAL and COUNTRY configs)", async () => {
    const made = await staff('admin', 'POST', '/v1/tenants', {
      json: { id: 'atkone-other', name: 'Other Co', country: 'KE', baseCurrency: 'KES' },
      key: `tenant-${randomUUID()}`,
    });
    assert.equal(made.status, 201, made.text);
    const other = await putServiceToken(tdb.db, 'atkone-other', 'atkone-admin', ['admin']);
    const otherAdmin = (
      method: string,
      path: string,
      o: { json?: unknown; headers?: Record<string, string> } = {},
    ) =>
      call(gw, method, path, {
        ...(o.json === undefined ? {} : { json: o.json }),
        headers: { authorization: `Bearer ${other}`, 'x-request-id': randomUUID(), ...o.headers },
      });
    const read = await otherAdmin('GET', '/v1/currencies/CHF');
    assert.equal(read.status, 200, `another tenant's Admin reads the table: ${read.text}`);
    const attempts: [string, Res][] = [
      ['delete', await otherAdmin('DELETE', '/v1/currencies/CHF')],
      [
        'change minor units',
        await otherAdmin('PATCH', '/v1/currencies/CHF', {
          json: { minor_units: 0 },
          headers: { 'if-match': '*' },
        }),
      ],
      [
        'add',
        await otherAdmin('POST', '/v1/currencies', {
          json: { code: 'BTN' },
          headers: { 'idempotency-key': `cur-${randomUUID()}` },
        }),
      ],
    ];
    const global = await staff('admin', 'POST', '/v1/configs', {
      json: { scope: 'GLOBAL', key: 'atkone.limit', value: 5 },
      key: `cfg-${randomUUID()}`,
    });
    assert.equal(global.status, 201, global.text);
    const key = () => ({ 'idempotency-key': `k-${randomUUID()}` });
    attempts.push(
      ['add a country', await otherAdmin('POST', '/v1/countries', { json: { code: 'BT' }, headers: key() })],
      [
        'change a country',
        await otherAdmin('PATCH', '/v1/countries/KE', { json: { name: 'X' }, headers: { 'if-match': '*' } }),
      ],
      ['delete a country', await otherAdmin('DELETE', '/v1/countries/KE')],
      [
        "replace a country's configuration",
        await otherAdmin('PUT', '/v1/countries/KE/config', { json: { values: { a: 1 } }, headers: key() }),
      ],
      [
        'a GLOBAL config',
        await otherAdmin('POST', '/v1/configs', {
          json: { scope: 'GLOBAL', key: 'atkone.limit', value: 0 },
          headers: key(),
        }),
      ],
      [
        'a COUNTRY config',
        await otherAdmin('POST', '/v1/configs', {
          json: { scope: 'COUNTRY', scopeRef: 'KE', key: 'atkone.limit', value: 0 },
          headers: key(),
        }),
      ],
      [
        'deactivate a GLOBAL config',
        await otherAdmin('PATCH', `/v1/configs/${global.json.id}`, {
          json: { status: 'INACTIVE' },
          headers: { 'if-match': '*' },
        }),
      ],
    );
    for (const [what, r] of attempts) refused(r, 'FORBIDDEN', what);
    const own = await otherAdmin('POST', '/v1/configs', {
      json: { scope: 'TENANT', key: 'atkone.limit', value: 1 },
      headers: key(),
    });
    assert.equal(own.status, 201, `its own tenant's config is still its Admin's: ${own.text}`);
    const cfg = await tdb.db.query<{ status: string }>('SELECT status FROM admin_configs WHERE id = $1', [
      global.json.id,
    ]);
    assert.equal(cfg.rows[0]?.status, 'ACTIVE');
    const { rows } = await tdb.db.query<{ code: string; minor_units: number }>(
      `SELECT code, minor_units FROM admin_currencies WHERE code IN ('CHF', 'BTN') ORDER BY code`,
    );
    assert.deepEqual(rows, [{ code: 'CHF', minor_units: 2 }]);
  });

  it('refuses an ops reversal of an id that is not an agent transaction of the tenant, moving nothing', async () => {
    const t = await pending('7.00');
    const posted = await confirm(alice, t.token, t.id, `cf-${randomUUID()}`);
    assert.equal(posted.status, 200, posted.text);
    const aliceBefore = await j.balance(alice.wallet);
    for (const id of [t.id, ...(posted.json.posting_ids ?? []), randomUUID()]) {
      const r = await staff('ops', 'POST', `/v1/ops/txns/${id}/reverse`, {
        json: {},
        key: `rv-${randomUUID()}`,
      });
      assert.ok(r.status >= 400 && r.status < 500, `${id}: ${r.status} ${r.text}`);
    }
    assert.equal(await j.balance(alice.wallet), aliceBefore);
    assert.deepEqual(await unbalanced(), []);
  });

  it('lets one of two currency edits sent with the same If-Match win; the other is 412', async () => {
    const read = await staff('admin', 'GET', '/v1/currencies/CHF');
    assert.equal(read.status, 200, read.text);
    const etag = read.headers.etag ?? '';
    assert.ok(etag);
    const edits = await Promise.all(
      ['Franc A', 'Franc B'].map((name) =>
        staff('admin', 'PATCH', '/v1/currencies/CHF', { json: { name }, headers: { 'if-match': etag } }),
      ),
    );
    assert.deepEqual(edits.map((r) => r.status).sort(), [200, 412], edits.map((r) => r.text).join(' | '));
  });

  it('a currency delete racing an account opened in it waits for the account and is refused', async () => {
    const added = await staff('admin', 'POST', '/v1/currencies', {
      json: { code: 'BTN' },
      key: `cur-${randomUUID()}`,
    });
    assert.equal(added.status, 201, added.text);
    const opening = await tdb.db.pool.connect();
    let deleted: Res;
    try {
      await opening.query('BEGIN');
      await openAccount(
        opening,
        {
          tenantId: 'demo',
          ownerType: 'platform',
          ownerId: 'btn-race',
          productCode: 'SETTLEMENT',
          currency: 'BTN',
          viaApi: false,
        },
        Date.now(),
      );
      const deleting = staff('admin', 'DELETE', '/v1/currencies/BTN');
      for (let i = 0; ; i++) {
        const { rows } = await tdb.db.query(
          `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%admin_currencies%FOR UPDATE%'`,
        );
        if (rows.length > 0) break;
        assert.ok(i < 500, 'the delete waits on the opening account');
        await new Promise((r) => setTimeout(r, 20));
      }
      await opening.query('COMMIT');
      deleted = await deleting;
    } finally {
      opening.release(true);
    }
    assert.equal(deleted.status, 409, deleted.text);
    assert.equal(deleted.json.code, 'CURRENCY_IN_USE');
  });
});
