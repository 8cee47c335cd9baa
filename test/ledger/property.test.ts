/**
 * Thousands of random concurrent postings, holds, captures, voids, reversals and replays over
 * many accounts; then every guarantee of core/ledger/INVARIANTS.md is checked against an
 * independent model built from the responses (micro-unit bigints, no ledger code reused).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { verifyChain } from '../../shared/audit.ts';
import { LedgerFixture, type Tenant } from './fixture.ts';
import { Rand } from '../helpers/rand.ts';

const operations = 2500;
const concurrency = 16;
const accountCount = 24;

function micro(text: string): bigint {
  const [w, f = ''] = text.split('.');
  const v = BigInt(w!.replace('-', '')) * 1_000_000n + BigInt(f.padEnd(6, '0'));
  return text.startsWith('-') ? -v : v;
}

describe('ledger property test', () => {
  let f: LedgerFixture;
  let t: Tenant;
  const seed = Number(process.env.LEDGER_SEED ?? Date.now() % 100_000);
  before(async () => {
    f = await LedgerFixture.start();
    t = await f.tenant();
  });
  after(() => f.close());

  it(`${operations} random concurrent operations keep every guarantee (seed ${seed})`, async () => {
    // Deterministic (test/helpers/rand.ts) so a failure can be replayed with the same seed.
    const source = new Rand(seed);
    const rand = () => source.next();
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)] as T;
    const amount = () => `${Math.floor(rand() * 300)}.${String(Math.floor(rand() * 100)).padStart(2, '0')}`;
    const accounts: string[] = [];
    for (let i = 0; i < accountCount; i++) accounts.push(await f.account(t));
    const settlement = t.settlement.KES as string;
    const all = [settlement, ...accounts];
    // The model: posted per account and pending per hold, from successful responses only.
    const posted = new Map<string, bigint>(all.map((a) => [a, 0n]));
    const holds = new Map<string, { debit: string; credit: string; amount: bigint; state: string }>();
    const postings: string[] = [];
    const replays: { key: string; body: unknown; path: string; text: string; status: number }[] = [];
    const applyEntries = (entries: { account_id: string; side: string; amount: string }[]) => {
      for (const e of entries)
        posted.set(
          e.account_id,
          (posted.get(e.account_id) ?? 0n) + (e.side === 'credit' ? micro(e.amount) : -micro(e.amount)),
        );
    };
    for (const a of accounts) {
      const r = await f.transfer(t, settlement, a, '1000.00');
      applyEntries(r.json.entries);
    }
    const counts = new Map<string, number>();
    let keySeq = 0;
    const send = async (path: string, body: unknown) => {
      const key = `prop-${seed}-${keySeq++}`;
      const r = await f.req(t.write, 'POST', path, body, { 'idempotency-key': key });
      if (rand() < 0.05) replays.push({ key, body, path, text: r.text, status: r.status });
      counts.set(
        `${path.split('/')[3]}:${r.status === 201 || r.status === 200 ? 'ok' : r.json?.code}`,
        (counts.get(`${path.split('/')[3]}:${r.status === 201 || r.status === 200 ? 'ok' : r.json?.code}`) ??
          0) + 1,
      );
      if (r.status >= 500) assert.fail(`server error ${r.status}: ${r.text}`);
      return r;
    };
    const one = async () => {
      const x = rand();
      if (x < 0.45) {
        const n = 2 + Math.floor(rand() * 3);
        const debit = pick(accounts);
        const parts = Array.from({ length: n - 1 }, () => amount()).filter((p) => micro(p) > 0n);
        if (parts.length === 0) return;
        const total = parts.reduce((s, p) => s + micro(p), 0n);
        const totalText = `${total / 1_000_000n}.${String(total % 1_000_000n)
          .padStart(6, '0')
          .slice(0, 2)}`;
        const entries = [
          { account_id: debit, side: 'debit', amount: totalText },
          ...parts.map((p) => ({ account_id: pick(all), side: 'credit', amount: p })),
        ];
        const r = await send('/v1/core/postings', { currency: 'KES', entries });
        if (r.status === 201) {
          applyEntries(r.json.entries);
          postings.push(r.json.id);
        } else assert.ok(['INSUFFICIENT_FUNDS'].includes(r.json.code), r.text);
      } else if (x < 0.65) {
        const a = pick(accounts);
        let b = pick(all);
        if (b === a) b = settlement;
        const r = await send('/v1/core/holds', {
          debit_account_id: a,
          credit_account_id: b,
          currency: 'KES',
          amount: amount() === '0.00' ? '1.00' : amount(),
        });
        if (r.status === 201)
          holds.set(r.json.id, { debit: a, credit: b, amount: micro(r.json.amount), state: 'pending' });
        else assert.ok(['INSUFFICIENT_FUNDS', 'INVALID_AMOUNT'].includes(r.json.code), r.text);
      } else if (x < 0.8) {
        const ids = [...holds.keys()];
        if (ids.length === 0) return;
        const id = pick(ids);
        const h = holds.get(id)!;
        const full = rand() < 0.5;
        const part = rand() < 0.1 ? h.amount + 1_000_000n : h.amount / 2n || h.amount;
        const partText = `${part / 1_000_000n}.${String(part % 1_000_000n).padStart(6, '0')}`.replace(
          /0{1,4}$/,
          '',
        );
        const r = await send(`/v1/core/holds/${id}/capture`, full ? {} : { amount: partText });
        if (r.status === 200) {
          assert.equal(h.state, 'pending', 'a hold is captured once');
          h.state = 'captured';
          const c = micro(r.json.captured_amount);
          assert.ok(c <= h.amount);
          posted.set(h.debit, posted.get(h.debit)! - c);
          posted.set(h.credit, posted.get(h.credit)! + c);
        } else
          assert.ok(
            ['HOLD_NOT_PENDING', 'CAPTURE_EXCEEDS_HOLD', 'INVALID_AMOUNT'].includes(r.json.code),
            r.text,
          );
      } else if (x < 0.88) {
        const ids = [...holds.keys()];
        if (ids.length === 0) return;
        const id = pick(ids);
        const r = await send(`/v1/core/holds/${id}/void`, {});
        if (r.status === 200) {
          assert.equal(holds.get(id)!.state, 'pending');
          holds.get(id)!.state = 'voided';
        } else assert.equal(r.json.code, 'HOLD_NOT_PENDING', r.text);
      } else {
        if (postings.length === 0) return;
        const id = pick(postings);
        const r = await send(`/v1/core/postings/${id}/reverse`, {});
        if (r.status === 201) applyEntries(r.json.entries);
        else assert.ok(['POSTING_ALREADY_REVERSED', 'INSUFFICIENT_FUNDS'].includes(r.json.code), r.text);
      }
    };
    let started = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (started < operations) {
          started++;
          await one();
        }
      }),
    );

    // Idempotent replays are identical, byte for byte, even after everything else ran.
    for (const r of replays) {
      const again = await f.req(t.write, 'POST', r.path, r.body, { 'idempotency-key': r.key });
      assert.equal(again.status, r.status);
      assert.equal(again.text, r.text);
    }

    // Each balance equals the model, and equals the sum of its entries; pending = pending holds.
    const db = f.db;
    const { rows } = await db.query<{
      account_id: string;
      posted: string;
      pending_debits: string;
      pending_credits: string;
      entries: string;
      avail: string;
      floor: boolean;
    }>(
      `SELECT b.account_id, (b.credits_posted - b.debits_posted)::text AS posted, b.pending_debits::text, b.pending_credits::text,
              coalesce((SELECT sum(CASE side WHEN 'credit' THEN amount ELSE -amount END) FROM ledger_entries e WHERE e.tenant_id = b.tenant_id AND e.account_id = b.account_id), 0)::text AS entries,
              (b.credits_posted - b.debits_posted - b.pending_debits + b.overdraft_limit)::text AS avail, b.debits_must_not_exceed_credits AS floor
         FROM ledger_balances b WHERE b.tenant_id = $1`,
      [t.id],
    );
    for (const r of rows) {
      assert.equal(micro(r.posted), posted.get(r.account_id), `posted of ${r.account_id} matches the model`);
      assert.equal(micro(r.posted), micro(r.entries), `balance of ${r.account_id} = sum of its entries`);
      const pd = [...holds.values()]
        .filter((h) => h.state === 'pending' && h.debit === r.account_id)
        .reduce((s, h) => s + h.amount, 0n);
      const pc = [...holds.values()]
        .filter((h) => h.state === 'pending' && h.credit === r.account_id)
        .reduce((s, h) => s + h.amount, 0n);
      assert.equal(micro(r.pending_debits), pd, 'pending debits = pending holds');
      assert.equal(micro(r.pending_credits), pc, 'pending credits = pending holds');
      if (r.floor) assert.ok(micro(r.avail) >= 0n, `available of ${r.account_id} is not negative`);
    }
    // Debits = credits overall and per currency, and per posting.
    const totals = await db.query<{ currency: string; d: string; c: string }>(
      `SELECT currency, sum(amount) FILTER (WHERE side = 'debit')::text AS d, sum(amount) FILTER (WHERE side = 'credit')::text AS c
         FROM ledger_entries WHERE tenant_id = $1 GROUP BY currency`,
      [t.id],
    );
    for (const r of totals.rows) assert.equal(r.d, r.c, `debits = credits in ${r.currency}`);
    const unbalanced = await db.query(
      `SELECT posting_id FROM ledger_entries WHERE tenant_id = $1 GROUP BY posting_id, currency
       HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0`,
      [t.id],
    );
    assert.equal(unbalanced.rowCount, 0);
    const model = [...posted.values()].reduce((s, v) => s + v, 0n);
    assert.equal(model, 0n, 'the model sums to zero too');
    const twice = await db.query(
      `SELECT reverses_posting_id FROM ledger_postings WHERE tenant_id = $1 AND reverses_posting_id IS NOT NULL GROUP BY 1 HAVING count(*) > 1`,
      [t.id],
    );
    assert.equal(twice.rowCount, 0);
    const chain = await verifyChain(db, t.id);
    assert.equal(chain.ok, true);
    // Enough of each kind actually happened for the test to mean something.
    for (const k of ['postings:ok', 'holds:ok', 'postings:INSUFFICIENT_FUNDS'])
      assert.ok((counts.get(k) ?? 0) > 20, `${k}: ${counts.get(k)}`);
    assert.ok([...counts.keys()].some((k) => k === 'holds:ok'));
    assert.ok((counts.get('postings:ok') ?? 0) + (counts.get('holds:ok') ?? 0) > 500);
  });
});
