/**
 * The ledger's write operations as the routes (and the bench) call them: pure checks first,
 * then the batcher (which claims the idempotency key in the batch's transaction). Also the hold
 * expiry sweeper, which runs through the same batcher so expiry takes the same locks.
 *
 * Every core instance runs the sweeper (issue 23 item 6). A hold leaves pending once whoever
 * expires it (G7: ledger_do_expire locks the hold and re-reads its status, so a second sweeper
 * or a capture racing it finds it no longer pending and counts nothing); on top, one instance
 * sweeps at a time (../db/exclusive.ts), so sweepers do not queue on the same balance rows or
 * write audit records for holds another one expired.
 */
import type { Logger } from 'pino';
import type { Static } from '@sinclair/typebox';
import { runExclusive } from '../db/exclusive.ts';
import type { Db } from '../../shared/db/pool.ts';
import { principalOf, requestHash, type IdemScope, type StoredResponse } from '../idempotency/idempotency.ts';
import type { ResponseVault } from '../idempotency/secrets.ts';
import type { CorePrincipal } from '../oauth/bearer.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import {
  LedgerBatcher,
  type ApplyResult,
  type BatchStepTimer,
  type Job,
  type LedgerCommand,
} from './batcher.ts';
import { amountOf, buildPost, defaultTransactionType, knownCurrency } from './commands.ts';
import { auditFeeIncomeMoves } from './fee-income.ts';
import { parseAmount, toDb } from '../../shared/money.ts';
import { holdView, postingView } from './render.ts';
import {
  defaultHoldLifetimeS,
  type CaptureHold,
  type CreateHold,
  type CreatePostingBody,
  type ReversePosting,
} from './schemas.ts';
import { AppError } from '../../shared/errors.ts';
import { checkMoneyMovement, type MoneyScope } from '../http/money.ts';
import { budgetDayStart } from '../../shared/api-key-budget.ts';

/** Who expires holds, in their audit records (the house's system actors: `{type: 'system', id: <job>}`). */
const holdSweeper = { type: 'system', id: 'hold-sweeper' } as const;

/**
 * The holds an expire command expired (ledger_do_expire answers their ids); every hold it was
 * given when it failed (each record then says why) or when a function of an earlier release
 * answers no ids (the whole list, as that release recorded it).
 */
function expiredHolds(r: ApplyResult, given: { id: string }[]): string[] {
  const ids = r.ok ? r.holds : undefined;
  return Array.isArray(ids)
    ? ids.filter((id): id is string => typeof id === 'string')
    : given.map((h) => h.id);
}

/** How often expired holds are swept, and how many per sweep. */
export const holdSweepIntervalMs = 1000;
export const holdSweepBatch = 500;

export interface WriteCtx {
  principal: CorePrincipal;
  requestId: string;
  key: string;
  method: string;
  path: string;
  body: unknown;
}

export interface LedgerDeps {
  db: Db;
  log: Logger;
  now: () => number;
  inFlightBatches?: number;
  batchWindowMs?: number;
  maxBatchCommands?: number;
  /** Times each round trip of a batch (the ledger profile). */
  stepTimer?: BatchStepTimer;
  /** Seals stored responses that carry a secret (none of the ledger's do; without it one is refused). */
  keys?: ResponseVault;
}

type Render = Job['render'];

/** The write's Idempotency-Key scope: the core client or API key that core verified (issue 13 item 3). */
export function writeScope(ctx: WriteCtx): IdemScope {
  return {
    tenantId: ctx.principal.tenantId,
    principal: principalOf('client', ctx.principal.clientId),
    key: ctx.key,
    method: ctx.method,
    path: ctx.path,
    requestHash: requestHash(ctx.method, ctx.path, ctx.body),
  };
}

export class Ledger {
  readonly batcher: LedgerBatcher;
  private timer: NodeJS.Timeout | undefined;
  private sweeping = false;

  constructor(private readonly deps: LedgerDeps) {
    this.batcher = new LedgerBatcher(deps.db, deps.log, {
      inFlightBatches: deps.inFlightBatches,
      batchWindowMs: deps.batchWindowMs,
      maxBatchCommands: deps.maxBatchCommands,
      stepTimer: deps.stepTimer,
      vault: deps.keys,
    });
  }

  private async run(
    ctx: WriteCtx,
    cmd: LedgerCommand,
    render: Render,
    action: string,
    target: { type: string; id: string },
  ): Promise<StoredResponse> {
    countAgainstApiKey(cmd, checkMoneyMovement([cmd.op]), this.deps.now());
    const scope = writeScope(ctx);
    // No look-up of the key before queueing: the batch claims it (a replay or a conflicting
    // request loses the claim and is answered from the stored response after the commit), so a
    // first request costs no extra round trip.
    return this.batcher.submit({
      cmd,
      scope,
      render,
      audit: {
        tenantId: scope.tenantId,
        actor: { type: 'client', id: ctx.principal.clientId },
        action,
        target,
        attrs: { request_id: ctx.requestId },
        ts: new Date(this.deps.now()),
      },
    });
  }

  /** POST /v1/core/postings */
  post(ctx: WriteCtx, body: CreatePostingBody): Promise<StoredResponse> {
    const { cmd } = buildPost(ctx.principal.tenantId, body, this.deps.now());
    const render: Render = (r) => ({
      status: 201,
      body: JSON.stringify(
        postingView({
          ...cmd,
          kind: 'posting',
          reverses_posting_id: null,
          hold_id: null,
          created_at: r.created_at,
        }),
      ),
    });
    return this.run(ctx, cmd, render, 'posting.create', { type: 'posting', id: String(cmd.id) });
  }

  /** POST /v1/core/postings/{id}/reverse */
  reverse(ctx: WriteCtx, postingId: string, body: Static<typeof ReversePosting>): Promise<StoredResponse> {
    const now = this.deps.now();
    const cmd: LedgerCommand = {
      op: 'reverse',
      tenant: ctx.principal.tenantId,
      id: uuidv7(now),
      transaction_id: uuidv7(now),
      posting_id: postingId.toLowerCase(),
      description: body.description ?? null,
    };
    const render: Render = (r) => ({
      status: 201,
      body: JSON.stringify(
        postingView({
          id: cmd.id,
          transaction_id: cmd.transaction_id,
          kind: 'reversal',
          type: 'REVERSAL',
          currency: r.currency,
          description: body.description ?? `reversal of ${String(r.reverses_posting_id)}`,
          metadata: {},
          entries: r.entries,
          reverses_posting_id: r.reverses_posting_id,
          hold_id: null,
          created_at: r.created_at,
        }),
      ),
    });
    return this.run(ctx, cmd, render, 'posting.reverse', { type: 'posting', id: postingId.toLowerCase() });
  }

  /** POST /v1/core/holds */
  hold(ctx: WriteCtx, body: Static<typeof CreateHold>): Promise<StoredResponse> {
    knownCurrency(body.currency);
    const micro = amountOf(body.amount, body.currency, 'amount');
    if (body.debit_account_id.toLowerCase() === body.credit_account_id.toLowerCase()) {
      throw new AppError('SAME_ACCOUNT', 'a hold moves money between two different accounts');
    }
    const now = this.deps.now();
    const cmd: LedgerCommand = {
      op: 'hold',
      tenant: ctx.principal.tenantId,
      id: uuidv7(now),
      transaction_id: uuidv7(now),
      type: body.transaction_type ?? defaultTransactionType,
      debit_account_id: body.debit_account_id.toLowerCase(),
      credit_account_id: body.credit_account_id.toLowerCase(),
      currency: body.currency,
      amount: toDb(micro),
      description: body.description ?? null,
      metadata: body.metadata ?? {},
      expires_at: new Date(now + (body.expires_in_s ?? defaultHoldLifetimeS) * 1000).toISOString(),
    };
    return this.run(ctx, cmd, holdRender(201), 'hold.create', { type: 'hold', id: String(cmd.id) });
  }

  /** POST /v1/core/holds/{id}/capture (full, or partial: the rest is released). */
  async capture(ctx: WriteCtx, holdId: string, body: Static<typeof CaptureHold>): Promise<StoredResponse> {
    let amount: string | null = null;
    if (body.amount !== undefined) {
      const { rows } = await this.deps.db.query<{ currency: string }>(
        'SELECT currency FROM ledger_holds WHERE tenant_id = $1 AND id = $2',
        [ctx.principal.tenantId, holdId.toLowerCase()],
      );
      const currency = rows[0]?.currency;
      const r = currency
        ? { ok: true as const, micro: amountOf(body.amount, currency, 'amount') }
        : parseAmount(body.amount);
      if (!r.ok) throw new AppError('INVALID_AMOUNT', `amount ${r.reason}`);
      amount = toDb(r.micro);
    }
    const now = this.deps.now();
    const cmd: LedgerCommand = {
      op: 'capture',
      tenant: ctx.principal.tenantId,
      hold_id: holdId.toLowerCase(),
      amount,
      id: uuidv7(now),
      now: new Date(now).toISOString(),
    };
    return this.run(ctx, cmd, holdRender(200), 'hold.capture', { type: 'hold', id: holdId.toLowerCase() });
  }

  /** POST /v1/core/holds/{id}/void */
  void(ctx: WriteCtx, holdId: string): Promise<StoredResponse> {
    const cmd: LedgerCommand = {
      op: 'void',
      tenant: ctx.principal.tenantId,
      hold_id: holdId.toLowerCase(),
      now: new Date(this.deps.now()).toISOString(),
    };
    return this.run(ctx, cmd, holdRender(200), 'hold.void', { type: 'hold', id: holdId.toLowerCase() });
  }

  /**
   * Expire pending holds past their time, one command per tenant; returns how many. Each hold it
   * expired gets its own record, `hold.expire` on target {type: 'hold', id} as its capture and void
   * are, so `GET /v1/audit?resource=hold&resource_id=` finds it; written in the sweep's transaction
   * (the batcher's one insert), naming only the holds this sweep expired, not those a capture or
   * another sweeper took first.
   */
  async sweepExpiredHolds(): Promise<number> {
    const now = new Date(this.deps.now()).toISOString();
    const { rows } = await this.deps.db.query<{ tenant_id: string; id: string }>(
      `SELECT tenant_id, id FROM ledger_holds WHERE status = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2`,
      [now, holdSweepBatch],
    );
    const byTenant = new Map<string, { tenant: string; id: string }[]>();
    for (const r of rows)
      byTenant.set(r.tenant_id, [...(byTenant.get(r.tenant_id) ?? []), { tenant: r.tenant_id, id: r.id }]);
    let expired = 0;
    await Promise.all(
      [...byTenant].map(([tenant, holds]) =>
        this.batcher.submit({
          cmd: { op: 'expire', tenant, holds, now },
          render: (r) => {
            expired += typeof r.expired === 'number' ? r.expired : 0;
            return { status: 200, body: '{}' };
          },
          auditsOf: (r) =>
            expiredHolds(r, holds).map((id) => ({
              actor: holdSweeper,
              action: 'hold.expire',
              target: { type: 'hold', id },
              attrs: { outcome: r.ok ? 'ok' : r.code },
            })),
        }),
      ),
    );
    return expired;
  }

  /** One sweep unless another instance is sweeping now (then `undefined`). */
  sweepOnce(): Promise<number | undefined> {
    return runExclusive(this.deps.db, 'holdExpiry', () => this.sweepExpiredHolds());
  }

  /** Start the expiry sweeper (stopped by `stop`), and audit migration 0955's fee-income moves. */
  start(): void {
    if (this.timer) return;
    auditFeeIncomeMoves(this.deps.db, this.deps.now()).catch((err: unknown) =>
      this.deps.log.warn({ err: (err as Error).message }, 'auditing the fee-income moves failed'),
    );
    this.timer = setInterval(() => {
      if (this.sweeping) return;
      this.sweeping = true;
      this.sweepOnce()
        .catch((err: unknown) =>
          this.deps.log.warn({ err: (err as Error).message }, 'hold expiry sweep failed'),
        )
        .finally(() => {
          this.sweeping = false;
        });
    }, holdSweepIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * SPEC 5.4.5 (issue 13 item 5): on a route whose amount the ledger counts, a reversal or a
 * capture by an API key carries the key and the day, and `ledger_apply` counts what it moved
 * in the same transaction (migration 0730), refusing past the budget. A hold whose amount the
 * edge counted is marked, so the same key's capture of it is not counted twice.
 */
function countAgainstApiKey(cmd: LedgerCommand, scope: MoneyScope | undefined, nowMs: number): void {
  const keyId = scope?.apiKeyId;
  if (!scope || keyId === undefined) return;
  if (scope.movement === 'ledger') {
    // Only these two are counted by the ledger; anything else would move money uncounted.
    if (cmd.op !== 'reverse' && cmd.op !== 'capture')
      throw new Error(`the ledger cannot count a ${cmd.op} against an API key budget`);
    cmd.budget = { key_id: keyId, window_start: budgetDayStart(nowMs).toISOString() };
  }
  const counted = scope.edgeCount;
  if (cmd.op === 'hold' && counted && counted.currency === cmd.currency) cmd.counted_by_key = keyId;
}

function holdRender(status: number): Render {
  return (r) => ({ status, body: JSON.stringify(holdView(r.hold as Record<string, unknown>)) });
}
