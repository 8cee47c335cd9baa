/**
 * Money movement is a property declared on the route (issue 13 item 5): a route that reaches the
 * ledger's postings, holds, captures or reversals without declaring how an API key's amount
 * budget counts it (RouteSpec.movesMoney) fails and moves nothing, whichever way it reaches
 * the ledger (the batcher, or ledger_apply inside a domain transaction).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { apply, postCmd } from '../../core/agents/ledger.ts';
import { defineRoute, type RouteSpec } from '../../core/http/route.ts';
import { createCoreServer } from '../../core/http/server.ts';
import { toReply } from '../../core/idempotency/idempotency.ts';
import { writeCtx, type LedgerRouteDeps } from '../../core/ledger/http.ts';
import { IdParams } from '../../core/ledger/schemas.ts';
import { Ledger } from '../../core/ledger/service.ts';
import { createLogger } from '../../core/platform/log.ts';
import { createMetrics } from '../../core/platform/metrics.ts';
import type { MoneyMovement } from '../../lib/api-key-budget.ts';
import { call, serve } from '../helpers/http.ts';
import { LedgerFixture, type Tenant } from './fixture.ts';

describe('routes that move money must declare it', () => {
  let f: LedgerFixture;
  let t: Tenant;
  let from = '';
  let to = '';
  let origin = '';
  let close: () => Promise<void>;

  /** A reversal through the batcher, and a posting through ledger_apply in a transaction. */
  function routes(deps: LedgerRouteDeps, movesMoney: MoneyMovement | undefined, prefix: string): RouteSpec[] {
    const declared = movesMoney ? { movesMoney } : {};
    return [
      defineRoute({
        method: 'POST', path: `/${prefix}/reverse/{id}`, operationId: `${prefix}Reverse`, summary: 'test', tags: [], params: IdParams, bodyKind: 'json', ...declared,
        responses: { 201: { description: 'reversal' } },
        handler: async (ctx) => toReply(await deps.ledger.reverse(await writeCtx(deps, ctx), ctx.params.id, {})),
      }),
      defineRoute({
        method: 'POST', path: `/${prefix}/post`, operationId: `${prefix}Post`, summary: 'test', tags: [], bodyKind: 'json', ...declared,
        responses: { 201: { description: 'posting' } },
        handler: async () => {
          await deps.db.tx((q) => apply(q, [postCmd(t.id, 'TRANSFER', 'KES', [{ account: from, side: 'debit', amount: 1_000_000n }, { account: to, side: 'credit', amount: 1_000_000n }], 'test', {}, Date.now())]));
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
    const deps: LedgerRouteDeps = { db, keys: f.t.keys, log, now: Date.now, ledger: new Ledger({ db, log, now: Date.now }) };
    const s = await serve(createCoreServer({ routes: [...routes(deps, undefined, 'undeclared'), ...routes(deps, 'ledger', 'declared')], log, metrics: createMetrics() }));
    origin = s.origin;
    close = s.close;
  });
  after(async () => {
    await close();
    await f.close();
  });

  const postings = async (): Promise<number> => Number((await f.t.tdb.db.query<{ n: string }>('SELECT count(*) AS n FROM ledger_postings WHERE tenant_id = $1', [t.id])).rows[0]?.n);

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
    assert.equal((await call(origin, 'POST', `/declared/reverse/${p.json.id}`, { json: {}, headers: { ...headers, 'idempotency-key': 'declared-0001' } })).status, 201);
    assert.equal((await call(origin, 'POST', '/declared/post', { json: {}, headers })).status, 201);
    assert.equal(await postings(), before + 2);
  });
});
