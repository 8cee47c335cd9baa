/** Ledger test fixture: a real core, tenants, OAuth clients with tokens, funded accounts. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { call, type Res } from '../helpers/http.ts';
import { createClient, type CoreScope } from '../../core/oauth/clients.ts';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import { openSettlement } from './tenant-db.ts';

export interface Tenant {
  id: string;
  write: string;
  read: string;
  settlement: Record<string, string>;
}

export class LedgerFixture {
  private constructor(readonly t: TestCore) {}

  static async start(): Promise<LedgerFixture> {
    return new LedgerFixture(await startTestCore());
  }

  get origin(): string {
    return this.t.origin;
  }

  async close(): Promise<void> {
    await this.t.close();
  }

  async token(tenantId: string, scopes: CoreScope[]): Promise<string> {
    const c = await createClient(this.t.tdb.db, { tenantId, scopes });
    const r = await call(this.origin, 'POST', '/oauth2/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: c.clientId,
        client_secret: c.clientSecret,
      }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(r.status, 200, r.text);
    return r.json.access_token as string;
  }

  async tenant(currencies: string[] = ['KES']): Promise<Tenant> {
    const id = `t-${randomBytes(4).toString('hex')}`;
    const db = this.t.tdb.db;
    await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`, [
      id,
    ]);
    await ensureTenantLedger(db, id);
    const settlement: Record<string, string> = {};
    for (const currency of currencies) settlement[currency] = await openSettlement(db, id, currency);
    return {
      id,
      write: await this.token(id, ['core:write']),
      read: await this.token(id, ['core:read']),
      settlement,
    };
  }

  req(
    token: string,
    method: string,
    path: string,
    json?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Res> {
    const h: Record<string, string> = { authorization: `Bearer ${token}`, ...headers };
    if (method === 'POST' && h['idempotency-key'] === undefined)
      h['idempotency-key'] = `k-${randomBytes(8).toString('hex')}`;
    if (h['idempotency-key'] === '') delete h['idempotency-key'];
    return call(this.origin, method, path, json === undefined ? { headers: h } : { json, headers: h });
  }

  async account(t: Tenant, currency = 'KES', product = 'WALLET_MAIN'): Promise<string> {
    const r = await this.req(t.write, 'POST', '/v1/core/accounts', {
      owner_type: 'customer',
      owner_id: randomBytes(4).toString('hex'),
      product_code: product,
      currency,
    });
    assert.equal(r.status, 201, r.text);
    return r.json.id as string;
  }

  /** Move `amount` from `from` to `to` (a two-leg posting); returns the response. */
  transfer(
    t: Tenant,
    from: string,
    to: string,
    amount: string,
    currency = 'KES',
    key?: string,
  ): Promise<Res> {
    return this.req(
      t.write,
      'POST',
      '/v1/core/postings',
      {
        currency,
        entries: [
          { account_id: from, side: 'debit', amount },
          { account_id: to, side: 'credit', amount },
        ],
      },
      key ? { 'idempotency-key': key } : {},
    );
  }

  async fund(t: Tenant, account: string, amount: string, currency = 'KES'): Promise<void> {
    const r = await this.transfer(t, t.settlement[currency] as string, account, amount, currency);
    assert.equal(r.status, 201, r.text);
  }

  async balances(t: Tenant, account: string): Promise<Record<string, string>> {
    const r = await this.req(t.read, 'GET', `/v1/core/accounts/${account}/balances`);
    assert.equal(r.status, 200, r.text);
    return r.json as Record<string, string>;
  }

  get db() {
    return this.t.tdb.db;
  }
}
