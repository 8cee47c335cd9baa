/**
 * Customer transfers at core level (core/payments/transfers.ts): the module's own functions on a
 * real, seeded database with an injected clock — no gateway, no HTTP (the journey through the
 * gateway is test/e2e/transfers.test.ts). The callers are built as core's verifier would
 * build them from an AAL 2 token bound to the request (`orig`).
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Caller } from '../../core/identity/tokens.ts';
import { openAccount } from '../../core/ledger/accounts.ts';
import { Ledger } from '../../core/ledger/service.ts';
import {
  confirmTransfer,
  createTransfer,
  intentPayload,
  transferHoldS,
  type RequestFacts,
  type TransferInput,
} from '../../core/payments/transfers.ts';
import { seedDemo } from '../../core/seed.ts';
import { AppError } from '../../shared/errors.ts';
import { createLogger } from '../../shared/log.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { detachedRespellings } from '../helpers/respell.ts';

interface Person {
  id: string;
  wallet: string;
  deviceId: string;
  key: KeyObject;
}

describe('customer transfers at core level', () => {
  let tdb: TestDb;
  let settlement = '';
  let alice: Person;
  let bob: Person;
  let aliceToBob = '';
  const t0 = Date.parse('2026-05-04T09:00:00Z');
  let n = 0;

  const balance = async (account: string) =>
    (
      await tdb.db.query<{ posted: string; pending: string }>(
        'SELECT (credits_posted - debits_posted)::text AS posted, pending_debits::text AS pending FROM ledger_balances WHERE account_id = $1',
        [account],
      )
    ).rows[0];

  async function person(phone: string): Promise<Person> {
    const id = randomUUID();
    await tdb.db.query(
      `INSERT INTO customers (id, tenant_id, phone_e164, phone_verified_at) VALUES ($1, 'demo', $2, $3)`,
      [id, phone, new Date(t0)],
    );
    const wallet = (
      await tdb.db.tx((q) =>
        openAccount(
          q,
          {
            tenantId: 'demo',
            ownerType: 'customer',
            ownerId: id,
            productCode: 'WALLET_MAIN',
            currency: 'KES',
            viaApi: false,
          },
          t0,
        ),
      )
    ).id;
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const deviceId = randomUUID();
    await tdb.db.query(
      `INSERT INTO customer_devices (id, tenant_id, customer_id, public_key, created_at, usable_from, notified_at) VALUES ($1, 'demo', $2, $3, $4, $4, $4)`,
      [
        deviceId,
        id,
        Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url'),
        new Date(t0 - 86_400_000),
      ],
    );
    return { id, wallet, deviceId, key: privateKey };
  }

  async function fund(wallet: string, amount: string): Promise<void> {
    const cmd = {
      op: 'post',
      tenant: 'demo',
      id: uuidv7(),
      transaction_id: uuidv7(),
      type: 'TRANSFER',
      currency: 'KES',
      description: 'test funding',
      metadata: {},
      entries: [
        { account_id: settlement, side: 'debit', amount, currency: 'KES' },
        { account_id: wallet, side: 'credit', amount, currency: 'KES' },
      ],
    };
    const { rows } = await tdb.db.query<{ r: { ok: boolean }[] }>('SELECT ledger_apply($1::jsonb) AS r', [
      JSON.stringify([cmd]),
    ]);
    assert.equal(rows[0]?.r[0]?.ok, true);
  }

  /** A fresh AAL 2 grant bound to `orig`, as core's token verifier hands it over. */
  const callerOf = (p: Person, orig: string, aal = 2): Caller => ({
    tenantId: 'demo',
    customerId: p.id,
    sessionId: randomUUID(),
    aal,
    amr: ['pin', 'otp'],
    jti: randomUUID(),
    orig,
    expS: Math.floor(t0 / 1000) + 3600,
  });

  /** The request facts of a transfer, signed by the payer's device unless told otherwise. */
  function factsOf(
    p: Person,
    input: TransferInput,
    opts: { orig?: string; signer?: KeyObject } = {},
  ): RequestFacts {
    const orig = opts.orig ?? `orig-${++n}`;
    const signature = sign(
      null,
      Buffer.from(intentPayload({ ...input, orig }), 'utf8'),
      opts.signer ?? p.key,
    ).toString('base64url');
    return { orig, intentDeviceId: p.deviceId, intentSignature: signature, requestId: `req-${n}` };
  }

  const create = (caller: Caller, input: TransferInput, facts: RequestFacts, now = t0) =>
    tdb.db.tx((q) => createTransfer(q, caller, input, facts, now));
  const confirm = (caller: Caller, id: string, now: number) =>
    tdb.db.tx((q) =>
      confirmTransfer(
        q,
        caller,
        id,
        { orig: 'confirm', intentDeviceId: undefined, intentSignature: undefined, requestId: 'confirm' },
        now,
      ),
    );
  /** A transfer created the normal way: the caller's step-up bound to exactly this request. */
  const send = (p: Person, input: TransferInput, now = t0) => {
    const facts = factsOf(p, input);
    return create(callerOf(p, facts.orig), input, facts, now);
  };
  const input = (amount: string, reference = `ref-${++n}`): TransferInput => ({
    amount,
    currency: 'KES',
    beneficiaryId: aliceToBob,
    reference,
  });
  const refused = (code: string) => (err: unknown) => err instanceof AppError && err.code === code;

  before(async () => {
    tdb = await freshDatabase();
    await seedDemo(tdb.db);
    settlement =
      (
        await tdb.db.query<{ id: string }>(
          `SELECT id FROM ledger_accounts WHERE tenant_id = 'demo' AND product_code = 'SETTLEMENT' AND currency = 'KES' ORDER BY created_at LIMIT 1`,
        )
      ).rows[0]?.id ?? '';
    alice = await person('+254700100001');
    bob = await person('+254700100002');
    aliceToBob = randomUUID();
    await tdb.db.query(
      `INSERT INTO beneficiaries (id, tenant_id, customer_id, payee_customer_id) VALUES ($1, 'demo', $2, $3)`,
      [aliceToBob, alice.id, bob.id],
    );
    await fund(alice.wallet, '5000.00');
  });
  after(() => tdb.drop());

  it('holds amount and fee at create and posts both at confirm: the payer pays amount + fee, the payee gets the amount, fee income the fee', async () => {
    const feeIncomeBefore = await tdb.db.query<{ v: string }>(
      `SELECT coalesce(sum(b.credits_posted - b.debits_posted), 0)::text AS v FROM ledger_balances b JOIN ledger_accounts a ON a.tenant_id = b.tenant_id AND a.id = b.account_id
        WHERE a.tenant_id = 'demo' AND a.product_code = 'FEE_INCOME' AND a.currency = 'KES'`,
    );
    const t = await send(alice, input('1000.00'));
    assert.equal(t.status, 'PENDING');
    const fee = Number(t.fee);
    assert.ok(fee > 0, 'the demo schedule charges a fee');
    assert.equal(Number((await balance(alice.wallet))?.pending), 1000 + fee);
    const done = await confirm(callerOf(alice, 'confirm'), String(t.id), t0 + 60_000);
    assert.equal(done.status, 200);
    assert.equal(done.body.status, 'POSTED');
    assert.equal((done.body.posting_ids as string[]).length, 2);
    assert.deepEqual(await balance(alice.wallet), {
      posted: (5000 - 1000 - fee).toFixed(6),
      pending: '0.000000',
    });
    assert.equal((await balance(bob.wallet))?.posted, '1000.000000');
    const feeIncome = await tdb.db.query<{ v: string }>(
      `SELECT coalesce(sum(b.credits_posted - b.debits_posted), 0)::text AS v FROM ledger_balances b JOIN ledger_accounts a ON a.tenant_id = b.tenant_id AND a.id = b.account_id
        WHERE a.tenant_id = 'demo' AND a.product_code = 'FEE_INCOME' AND a.currency = 'KES'`,
    );
    assert.equal(Number(feeIncome.rows[0]?.v) - Number(feeIncomeBefore.rows[0]?.v), fee);
    const events = await tdb.db.query<{ event: string }>(
      `SELECT event FROM outbox WHERE aggregate = 'transfer' AND aggregate_id = $1 ORDER BY created_at, id`,
      [t.id],
    );
    assert.deepEqual(
      events.rows.map((e) => e.event),
      ['transfer.created', 'transfer.completed'],
    );
    const audits = await tdb.db.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE tenant_id = 'demo' AND target->>'id' = $1 ORDER BY id`,
      [t.id],
    );
    assert.deepEqual(
      audits.rows.map((a) => a.action),
      ['transfer.create', 'transfer.confirm'],
    );
    await assert.rejects(
      confirm(callerOf(alice, 'confirm'), String(t.id), t0 + 61_000),
      refused('TRANSFER_NOT_PENDING'),
    );
    await assert.rejects(
      confirm(callerOf(bob, 'confirm'), String(t.id), t0 + 61_000),
      refused('TRANSFER_NOT_FOUND'),
      "another customer's transfer",
    );
  });

  it('a transfer confirmed after its hold time is EXPIRED, kept with a transfer.failed event; its holds are released by the sweeper', async () => {
    const before = await balance(alice.wallet);
    const t = await send(alice, input('10.00'));
    const late = t0 + (transferHoldS + 1) * 1000;
    const r = await confirm(callerOf(alice, 'confirm'), String(t.id), late);
    assert.equal(r.status, 422);
    assert.equal(r.body.code, 'TRANSFER_EXPIRED');
    const { rows } = await tdb.db.query<{ status: string; failure_code: string }>(
      'SELECT status, failure_code FROM transfers WHERE id = $1',
      [t.id],
    );
    assert.deepEqual(rows[0], { status: 'EXPIRED', failure_code: 'TRANSFER_EXPIRED' });
    const events = await tdb.db.query<{ event: string }>(
      `SELECT event FROM outbox WHERE aggregate = 'transfer' AND aggregate_id = $1 ORDER BY created_at, id`,
      [t.id],
    );
    assert.deepEqual(
      events.rows.map((e) => e.event),
      ['transfer.created', 'transfer.failed'],
    );
    assert.notEqual(
      (await balance(alice.wallet))?.pending,
      before?.pending,
      'still held until the sweeper runs',
    );
    const sweeper = new Ledger({ db: tdb.db, log: createLogger('silent'), now: () => late });
    assert.ok((await sweeper.sweepExpiredHolds()) >= 1);
    assert.deepEqual(await balance(alice.wallet), before, 'nothing moved');
  });

  it('refuses, moving nothing: a step-up for another request or at AAL 1, a used step-up, a bad, respelled or reused intent signature, an unknown payee, a device in cool-off, the limit, the funds', async () => {
    const before = await balance(alice.wallet);
    const i = input('5.00');
    const f = factsOf(alice, i);
    await assert.rejects(create(callerOf(alice, 'another-request'), i, f), refused('MFA_REQUIRED'));
    await assert.rejects(create(callerOf(alice, f.orig, 1), i, f), refused('MFA_REQUIRED'));
    await assert.rejects(
      create(callerOf(alice, f.orig), i, factsOf(alice, i, { orig: f.orig, signer: bob.key })),
      refused('INTENT_SIGNATURE_INVALID'),
    );
    // The payer's own signature of this very transfer, spelled otherwise (the header has no schema).
    for (const [name, other] of detachedRespellings(f.intentSignature ?? '')) {
      await assert.rejects(
        create(callerOf(alice, f.orig), i, { ...f, intentSignature: other }),
        refused('INTENT_SIGNATURE_INVALID'),
        name,
      );
    }
    const grant = callerOf(alice, f.orig);
    const ok = await create(grant, i, f);
    assert.equal(ok.status, 'PENDING');
    const j = input('6.00');
    const g = factsOf(alice, j);
    await assert.rejects(
      create({ ...grant, orig: g.orig }, j, g),
      (err: unknown) => err instanceof Error && err.name === 'StepUpUsed',
      'one step-up, one transfer',
    );
    await assert.rejects(
      create(callerOf(alice, f.orig), i, f),
      refused('INTENT_SIGNATURE_REUSED'),
      'the same signed intent again',
    );
    const stranger = { ...input('5.00'), beneficiaryId: randomUUID() };
    const s = factsOf(alice, stranger);
    await assert.rejects(create(callerOf(alice, s.orig), stranger, s), refused('BENEFICIARY_NOT_FOUND'));
    const big = input('150000.01');
    const b = factsOf(alice, big);
    await assert.rejects(create(callerOf(alice, b.orig), big, b), refused('LIMIT_EXCEEDED'));
    const much = input('4999.00');
    const m = factsOf(alice, much);
    await assert.rejects(create(callerOf(alice, m.orig), much, m), refused('INSUFFICIENT_FUNDS'));
    await tdb.db.query('UPDATE customer_devices SET usable_from = $2 WHERE id = $1', [
      alice.deviceId,
      new Date(t0 + 3_600_000),
    ]);
    try {
      const c = input('5.00');
      const cf = factsOf(alice, c);
      await assert.rejects(create(callerOf(alice, cf.orig), c, cf), refused('DEVICE_COOLING_OFF'));
    } finally {
      await tdb.db.query('UPDATE customer_devices SET usable_from = $2 WHERE id = $1', [
        alice.deviceId,
        new Date(t0 - 86_400_000),
      ]);
    }
    const after = await balance(alice.wallet);
    assert.equal(after?.posted, before?.posted);
    assert.equal(
      Number(after?.pending) - Number(before?.pending),
      5 + Number(ok.fee),
      'only the one accepted transfer holds money',
    );
  });
});
