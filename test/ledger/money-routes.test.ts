/**
 * Money movement is a property declared on the route (issue 13 item 5): a route that reaches the
 * ledger's postings, holds, captures or reversals without declaring how an API key's amount
 * budget counts it (RouteSpec.movesMoney) fails and moves nothing, whichever way it reaches
 * the ledger (the batcher, or ledger_apply inside a domain transaction).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { applyInTx, postCmd } from '../../core/ledger/apply.ts';
import { ApiKeys } from '../../core/apikeys/store.ts';
import { defineRoute, type RouteSpec } from '../../core/http/route.ts';
import { createCoreServer } from '../../core/http/server.ts';
import { toReply } from '../../core/idempotency/idempotency.ts';
import { writeCtx, type LedgerRouteDeps } from '../../core/ledger/http.ts';
import { ledgerRoutes } from '../../core/ledger/routes.ts';
import { IdParams } from '../../core/ledger/schemas.ts';
import { Ledger } from '../../core/ledger/service.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import type { MoneyMovement } from '../../shared/api-key-budget.ts';
import { call, serve } from '../helpers/http.ts';
import { LedgerFixture, type Tenant } from './fixture.ts';

describe('routes that move money must declare it', () => {
  let f: LedgerFixture;
  let t: Tenant;
  let from = '';
  let to = '';
  let origin = '';
  let close: () => Promise<void>;
  const edgeSecret = 'edge-secret-for-this-test';

  /** A reversal through the batcher, and a posting through ledger_apply in a transaction. */
  function routes(deps: LedgerRouteDeps, movesMoney: MoneyMovement | undefined, prefix: string): RouteSpec[] {
    const declared = movesMoney ? { movesMoney } : {};
    return [
      defineRoute({
        method: 'POST',
        path: `/${prefix}/reverse/{id}`,
        operationId: `${prefix}Reverse`,
        summary: 'test',
        tags: [],
        params: IdParams,
        bodyKind: 'json',
        ...declared,
        responses: { 201: { description: 'reversal' } },
        handler: async (ctx) =>
          toReply(await deps.ledger.reverse(await writeCtx(deps, ctx), ctx.params.id, {})),
      }),
      defineRoute({
        method: 'POST',
        path: `/${prefix}/post`,
        operationId: `${prefix}Post`,
        summary: 'test',
        tags: [],
        bodyKind: 'json',
        ...declared,
        responses: { 201: { description: 'posting' } },
        handler: async () => {
          await deps.db.tx((q) =>
            applyInTx(q, [
              postCmd(
                t.id,
                'TRANSFER',
                'KES',
                [
                  { account: from, side: 'debit', amount: 1_000_000n },
                  { account: to, side: 'credit', amount: 1_000_000n },
                ],
                'test',
                {},
                Date.now(),
              ),
            ]),
          );
          return { status: 201, body: {} };
        },
      }),
    ];
  }

  before(async () => {
    f = await LedgerFixture.start();
    t = await f.tenant();
    from = await f.account(t);
    to = await f.account(t);
    await f.fund(t, from, '100.00');
    const log = createLogger('silent');
    const db = f.t.tdb.db;
    const deps: LedgerRouteDeps = {
      db,
      keys: f.t.keys,
      log,
      now: Date.now,
      ledger: new Ledger({ db, log, now: Date.now }),
    };
    const s = await serve(
      createCoreServer({
        routes: [
          ...routes(deps, undefined, 'undeclared'),
          ...routes(deps, 'ledger', 'declared'),
          ...ledgerRoutes(deps),
        ],
        log,
        metrics: createMetrics(),
        edgeSecrets: [edgeSecret],
      }),
    );
    origin = s.origin;
    close = s.close;
  });
  after(async () => {
    await close();
    await f.close();
  });

  const postings = async (): Promise<number> =>
    Number(
      (
        await f.t.tdb.db.query<{ n: string }>(
          'SELECT count(*) AS n FROM ledger_postings WHERE tenant_id = $1',
          [t.id],
        )
      ).rows[0]?.n,
    );

  it('a route without the declaration moves nothing, through the batcher or ledger_apply', async () => {
    const p = await f.transfer(t, from, to, '5.00');
    const before = await postings();
    const headers = { authorization: `Bearer ${t.write}`, 'idempotency-key': 'undeclared-0001' };
    const rev = await call(origin, 'POST', `/undeclared/reverse/${p.json.id}`, { json: {}, headers });
    assert.equal(rev.status, 500, rev.text);
    const post = await call(origin, 'POST', '/undeclared/post', { json: {}, headers });
    assert.equal(post.status, 500, post.text);
    assert.equal(await postings(), before, 'nothing was posted');
    // The same handlers on declared routes move the money.
    assert.equal(
      (
        await call(origin, 'POST', `/declared/reverse/${p.json.id}`, {
          json: {},
          headers: { ...headers, 'idempotency-key': 'declared-0001' },
        })
      ).status,
      201,
    );
    assert.equal((await call(origin, 'POST', '/declared/post', { json: {}, headers })).status, 201);
    assert.equal(await postings(), before + 2);
  });

  it('a capture in another currency than the key budget is refused as at the edge, and moves nothing', async () => {
    const usd = await f.tenant(['KES', 'USD']);
    const [payer, payee] = [await f.account(usd, 'USD'), await f.account(usd, 'USD')];
    await f.fund(usd, payer, '100.00', 'USD');
    const held = await f.req(usd.write, 'POST', '/v1/core/holds', {
      debit_account_id: payer,
      credit_account_id: payee,
      currency: 'USD',
      amount: '1.00',
    });
    assert.equal(held.status, 201, held.text);
    const { key } = await new ApiKeys(f.t.tdb.db, f.t.keys).create(usd.id, 'admin-1', {
      name: 'kes',
      scopes: ['core:write'],
      budget: { daily_amount: '50.00', currency: 'KES' },
      ipAllowlist: [],
      expiresAt: undefined,
    });
    // The identity the edge sends for a verified API key (edge/authz.ts), proven by the edge secret.
    const viaKey = {
      'x-edge-auth': edgeSecret,
      'x-credential': 'api-key',
      'x-principal-id': key.id,
      'x-tenant-id': usd.id,
      'x-scopes': 'core:write',
      'idempotency-key': 'usd-capture-01',
    };
    const cap = await call(origin, 'POST', `/v1/core/holds/${held.json.id}/capture`, {
      json: {},
      headers: viaKey,
    });
    assert.equal(cap.status, 403, cap.text);
    assert.equal(cap.json.code, 'POLICY_DENIED');
    const { rows } = await f.t.tdb.db.query<{ status: string }>(
      'SELECT status FROM ledger_holds WHERE tenant_id = $1 AND id = $2',
      [usd.id, held.json.id],
    );
    assert.equal(rows[0]?.status, 'pending');
    // Without the edge's secret the same headers are a client's claim: no key, so a token is required.
    const claimed = await call(origin, 'POST', `/v1/core/holds/${held.json.id}/capture`, {
      json: {},
      headers: { ...viaKey, 'x-edge-auth': 'guess', 'idempotency-key': 'usd-capture-02' },
    });
    assert.equal(claimed.status, 401, claimed.text);
  });

  it('a key whose stored budget is no amount has its capture refused, not blamed on the request; others go through', async () => {
    const kes = await f.tenant();
    const [payer, payee] = [await f.account(kes), await f.account(kes)];
    await f.fund(kes, payer, '100.00');
    const hold = async () => {
      const held = await f.req(kes.write, 'POST', '/v1/core/holds', {
        debit_account_id: payer,
        credit_account_id: payee,
        currency: 'KES',
        amount: '1.00',
      });
      assert.equal(held.status, 201, held.text);
      return held.json.id as string;
    };
    const capture = (hold: string, headers: Record<string, string>, idem: string) =>
      call(origin, 'POST', `/v1/core/holds/${hold}/capture`, {
        json: {},
        headers: { ...headers, 'idempotency-key': idem },
      });
    // Written before migrations 1104, 1112 and 1118 refused budgets that are no amount (an operator's SQL).
    const shapes = [
      ...['"1e999999"', 'null'].map((v) => `jsonb_set(budget, '{daily_amount}', '${v}')`),
      'to_jsonb(budget::text)',
      'jsonb_build_array(budget)',
      `'null'::jsonb`,
    ];
    for (const [i, legacy] of shapes.entries()) {
      const [bad, good] = [await hold(), await hold()];
      const { key } = await new ApiKeys(f.t.tdb.db, f.t.keys).create(kes.id, 'admin-1', {
        name: `legacy-${i}`,
        scopes: ['core:write'],
        budget: { daily_amount: '50.00', currency: 'KES' },
        ipAllowlist: [],
        expiresAt: undefined,
      });
      await f.t.tdb.db.tx(async (q) => {
        await q.query('ALTER TABLE api_keys DISABLE TRIGGER USER');
        await q.query(`UPDATE api_keys SET budget = ${legacy} WHERE tenant_id = $1 AND id = $2`, [
          kes.id,
          key.id,
        ]);
        await q.query('ALTER TABLE api_keys ENABLE TRIGGER USER');
      });
      const viaKey = {
        'x-edge-auth': edgeSecret,
        'x-credential': 'api-key',
        'x-principal-id': key.id,
        'x-tenant-id': kes.id,
        'x-scopes': 'core:write',
      };
      // Side by side, so the batcher may well put both in one batch.
      const [refused, captured] = await Promise.all([
        capture(bad, viaKey, `legacy-budget-${i}-1`),
        capture(good, { authorization: `Bearer ${kes.write}` }, `legacy-budget-${i}-2`),
      ]);
      assert.equal(refused.status, 403, `${legacy}: ${refused.text}`);
      assert.equal(refused.json.code, 'POLICY_DENIED');
      assert.match(refused.json.message, /budget_unreadable/);
      assert.equal(captured.status, 200, captured.text);
      const { rows } = await f.t.tdb.db.query<{ id: string; status: string }>(
        'SELECT id, status FROM ledger_holds WHERE tenant_id = $1 AND id = ANY($2::uuid[])',
        [kes.id, [bad, good]],
      );
      const status = new Map(rows.map((r) => [r.id, r.status]));
      assert.equal(status.get(bad), 'pending', `${legacy}: the refused capture moved nothing`);
      assert.notEqual(status.get(good), 'pending');
    }
  });
});
