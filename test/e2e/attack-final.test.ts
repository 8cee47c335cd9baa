/**
 * Attacks from outside on what landed last: the token endpoint's parsing of a client's request
 * (repeated parameters, a Basic credential beside another client's id) and the ledger's readers on
 * a core whose currency snapshot lags what another instance did to admin's currency table. Each
 * case is a hole found by trying it, kept so it stays closed.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { TestDb } from '../helpers/db.ts';
import { accountOpenedElsewhere } from '../helpers/ledger-rows.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { priceOf } from '../../core/agents/pricing.ts';
import { format, microPerUnit } from '../../shared/money.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { eventually, type Res } from '../helpers/http.ts';
import { tenantWithAdmin as createTenant } from '../helpers/tenants.ts';
import type { Demo } from '../helpers/journey.ts';

type DemoFile = Demo & {
  serviceTokens: Record<'admin', { token: string }>;
  coreClient: { clientId: string; clientSecret: string };
  settlementAccounts: Record<string, string>;
};

describe('attacks on the token request and on ledger readers of a lagging core', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let demo: DemoFile;

  const form = (body: string, headers: Record<string, string> = {}) => ({
    body,
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
  });
  const token = (body: string, headers: Record<string, string> = {}) =>
    callRetrying(gw, 'POST', '/oauth2/token', form(body, headers));
  const as = (bearer: string, method: string, path: string, json?: unknown): Promise<Res> => {
    const headers = {
      authorization: `Bearer ${bearer}`,
      'x-request-id': randomUUID(),
      'idempotency-key': `k-${randomUUID()}`,
    };
    return callRetrying(gw, method, path, json === undefined ? { headers } : { json, headers });
  };
  const refused = (r: Res, status: number, code: string, what: string) => {
    assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`);
    assert.equal(r.json?.code, code, `${what}: ${r.text}`);
  };

  /** A secret client that a new tenant's Admin registered through the gateway. */
  const clientOfNewTenant = async (tenant: string, method: string): Promise<Res> => {
    const admin = await createTenant(gw, demo.serviceTokens.admin.token, tdb.db, tenant);
    const made = await as(admin, 'POST', '/v1/oauth-clients', {
      name: 'attack',
      scopes: ['core:read'],
      token_endpoint_auth_method: method,
    });
    assert.equal(made.status, 201, made.text);
    return made;
  };

  before(async () => {
    e2e = await startE2eStack('atkfinal');
    ({ tdb, gw } = e2e);
    demo = e2e.demo as DemoFile;
  });
  after(() => e2e?.stop());

  it('a token request naming a parameter twice is refused invalid_request (RFC 6749 §3.2), whichever copy would win', async () => {
    const c = demo.coreClient;
    const id = encodeURIComponent(c.clientId);
    const secret = encodeURIComponent(c.clientSecret);
    const once = `grant_type=client_credentials&client_id=${id}&client_secret=${secret}`;
    const good = await token(`${once}&scope=core%3Aread`);
    assert.equal(good.status, 200, `each parameter once: ${good.text}`);
    for (const [what, body] of [
      ['scope twice', `${once}&scope=core%3Aread&scope=core%3Awrite`],
      ['grant_type twice', `${once}&grant_type=client_credentials`],
      ['client_id twice', `${once}&client_id=${id}`],
      ['client_secret twice', `${once}&client_secret=wrong`],
    ] as const) {
      const r = await token(body);
      refused(r, 400, 'VALIDATION_FAILED', what);
      assert.equal(r.json.error, 'invalid_request', what);
      assert.equal(r.json.access_token, undefined, what);
    }
  });

  it('a form token request with an extension parameter named like an object method is served as its JSON twin is (RFC 6749 §3.1: ignored)', async () => {
    const c = demo.coreClient;
    const once = `grant_type=client_credentials&client_id=${encodeURIComponent(c.clientId)}&client_secret=${encodeURIComponent(c.clientSecret)}`;
    for (const name of ['constructor', 'toString', 'hasOwnProperty']) {
      const viaForm = await token(`${once}&${name}=x`);
      assert.equal(viaForm.status, 200, `${name} once in a form: ${viaForm.text}`);
      const twice = await token(`${once}&${name}=x&${name}=y`);
      refused(twice, 400, 'VALIDATION_FAILED', `${name} twice in a form`);
    }
    const proto = await token(`${once}&__proto__=x&__proto__=y`);
    refused(proto, 400, 'VALIDATION_FAILED', '__proto__ twice in a form');
  });

  it('a JSON token request naming a key twice (however spelled) or a parameter that is not a string is refused invalid_request', async () => {
    const c = demo.coreClient;
    const fields = `"grant_type":"client_credentials","client_id":${JSON.stringify(c.clientId)},"client_secret":${JSON.stringify(c.clientSecret)}`;
    const json = (body: string) =>
      callRetrying(gw, 'POST', '/oauth2/token', { body, headers: { 'content-type': 'application/json' } });
    const good = await json(`{${fields},"scope":"core:read"}`);
    assert.equal(good.status, 200, `each key once: ${good.text}`);
    for (const [what, body] of [
      ['scope twice', `{${fields},"scope":"core:read","scope":"core:write"}`],
      ['scope twice, once escaped', `{${fields},"scope":"core:read","scop\\u0065":"core:write"}`],
      ['client_secret twice', `{${fields},"client_secret":"wrong"}`],
      ['grant_type twice', `{"grant_type":"nonsense",${fields}}`],
      // Not a string: once dropped in silence, so a scope list asked for every scope of the client.
      ['scope as a list', `{${fields},"scope":["core:read"]}`],
      ['scope as null', `{${fields},"scope":null}`],
      [
        'a client_secret as a number',
        `{"grant_type":"client_credentials","client_id":${JSON.stringify(c.clientId)},"client_secret":1}`,
      ],
    ] as const) {
      const r = await json(body);
      refused(r, 400, 'VALIDATION_FAILED', what);
      assert.equal(r.json.error, 'invalid_request', what);
      assert.equal(r.json.access_token, undefined, what);
    }
  });

  it('a token parameter written as a form list (scope[]=…) is refused, never ignored into every scope of the client', async () => {
    const c = demo.coreClient;
    const creds = `grant_type=client_credentials&client_id=${encodeURIComponent(c.clientId)}&client_secret=${encodeURIComponent(c.clientSecret)}`;
    const ok = await token(`${creds}&scope=core:read`);
    assert.equal(ok.status, 200, ok.text);
    for (const [what, body] of [
      ['scope[]', `${creds}&scope[]=core:read`],
      ['scope[0]', `${creds}&scope%5B0%5D=core:read`],
      ['scope[] beside scope', `${creds}&scope=core:read&scope[]=core:write`],
      ['client_id[]', `${creds}&client_id[]=x`],
      // A stray bracket or another case is not a different parameter either: ignored, it too
      // asked for no scope and got every scope of the client.
      ['scope[', `${creds}&scope[=core:read`],
      ['scope]', `${creds}&scope]=core:read`],
      ['scope[][]', `${creds}&scope[][]=core:read`],
      ['scope%5B%5D', `${creds}&scope%5B%5D=core:read`],
      ['SCOPE[]', `${creds}&SCOPE[]=core:read`],
      ['Scope', `${creds}&Scope=core:read`],
      ['client_secret[', `${creds}&client_secret[=${encodeURIComponent(c.clientSecret)}`],
    ] as const) {
      const r = await token(body);
      refused(r, 400, 'VALIDATION_FAILED', what);
      assert.equal(r.json.error, 'invalid_request', what);
      assert.equal(r.json.access_token, undefined, what);
      assert.ok(!r.text.includes(c.clientSecret), `${what}: the secret is not echoed`);
      assert.ok(!r.text.includes('core:'), `${what}: nor the value`);
    }
    const json = await callRetrying(gw, 'POST', '/oauth2/token', {
      json: {
        grant_type: 'client_credentials',
        client_id: c.clientId,
        client_secret: c.clientSecret,
        'scope[]': 'core:read',
      },
    });
    refused(json, 400, 'VALIDATION_FAILED', 'JSON scope[]');
    // An extension parameter that only looks like one is still ignored (RFC 6749 §3.1).
    const other = await token(`${creds}&scope=core:read&filter[x]=1&Filter=2`);
    assert.equal(other.status, 200, other.text);
  });

  it('a JSON token request with any parameter as an object, number, boolean, list or null is refused and issues nothing', async () => {
    const c = demo.coreClient;
    const base: Record<string, string> = {
      grant_type: 'client_credentials',
      client_id: c.clientId,
      client_secret: c.clientSecret,
      scope: 'core:read',
    };
    const names = [
      ...Object.keys(base),
      'client_assertion',
      'client_assertion_type',
      'resource',
      'x_extension',
    ];
    const values: unknown[] = [{ scope: 'core:read' }, 1, false, ['core:read'], null];
    for (const name of names)
      for (const value of values) {
        const what = `${name}: ${JSON.stringify(value)}`;
        const r = await callRetrying(gw, 'POST', '/oauth2/token', {
          body: JSON.stringify({ ...base, [name]: value }),
          headers: { 'content-type': 'application/json' },
        });
        refused(r, 400, 'VALIDATION_FAILED', what);
        assert.equal(r.json.error, 'invalid_request', what);
        assert.equal(r.json.access_token, undefined, what);
      }
  });

  it('a JSON token request is read once whatever its content type parameters, escapes or nesting: any repeat refused', async () => {
    const c = demo.coreClient;
    const fields = `"grant_type":"client_credentials","client_id":${JSON.stringify(c.clientId)},"client_secret":${JSON.stringify(c.clientSecret)}`;
    const json = (body: string, type: string) =>
      callRetrying(gw, 'POST', '/oauth2/token', { body, headers: { 'content-type': type } });
    const good = await json(`{${fields},"scope":"core:read"}`, 'Application/JSON; charset=UTF-8');
    assert.equal(good.status, 200, `a parameter on the media type: ${good.text}`);
    for (const [what, body, type] of [
      [
        'with a charset',
        `{${fields},"scope":"core:read","scope":"core:write"}`,
        'application/json; charset=utf-8',
      ],
      [
        'every letter escaped',
        `{${fields},"\u0063\u006c\u0069\u0065\u006e\u0074\u005f\u0069\u0064":"x"}`,
        'application/json',
      ],
      ['a repeat inside a nested object', `{${fields},"x":{"k":1,"k":2}}`, 'application/json'],
      ['__proto__ twice', `{${fields},"__proto__":{},"__proto__":"x"}`, 'application/json'],
      ['a repeat after an escaped quote', `{${fields},"a\"":"\"","a\u0022":1}`, 'application/json'],
    ] as const) {
      const r = await json(body, type);
      refused(r, 400, 'VALIDATION_FAILED', what);
      assert.equal(r.json.error, 'invalid_request', what);
      assert.equal(r.json.access_token, undefined, what);
    }
  });

  it("a Basic credential beside another client's client_id in the body is invalid_client", async () => {
    const c = demo.coreClient;
    const other = await clientOfNewTenant('atkfin-basic', 'client_secret_basic');
    const basic = `Basic ${Buffer.from(`${encodeURIComponent(c.clientId)}:${encodeURIComponent(c.clientSecret)}`).toString('base64')}`;
    const alone = await token('grant_type=client_credentials&scope=core%3Aread', { authorization: basic });
    assert.equal(alone.status, 200, `Basic alone: ${alone.text}`);
    const same = await token(
      `grant_type=client_credentials&scope=core%3Aread&client_id=${encodeURIComponent(c.clientId)}`,
      { authorization: basic },
    );
    assert.equal(same.status, 200, `Basic and the same client_id: ${same.text}`);
    const mixed = await token(
      `grant_type=client_credentials&scope=core%3Aread&client_id=${encodeURIComponent(other.json.client_id)}`,
      { authorization: basic },
    );
    refused(mixed, 401, 'INVALID_CLIENT', 'Basic of one client, body naming another');
    assert.equal(mixed.json.error, 'invalid_client');
  });

  it("a registered client's refused credential is in its tenant's audit, answered as any other invalid_client", async () => {
    const made = await clientOfNewTenant('atkfin-guess', 'client_secret_post');
    const guess = (secret: string) =>
      token(
        new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: made.json.client_id,
          client_secret: secret,
        }).toString(),
      );
    const wrong = await guess('not-the-secret');
    const unknown = await token(
      new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: `cc_${randomUUID()}`,
        client_secret: 'x',
      }).toString(),
    );
    for (const [what, r] of [
      ['a wrong secret', wrong],
      ['an unknown client', unknown],
    ] as const) {
      refused(r, 401, 'INVALID_CLIENT', what);
      assert.equal(r.json.error_description, 'client authentication failed', what);
    }
    const { rows } = await tdb.db.query<{
      actor: { id: string };
      decision: { allow: boolean };
      attrs: { refused: string; ip: string };
    }>(
      `SELECT actor, decision, attrs FROM audit_log WHERE tenant_id = 'atkfin-guess' AND action = 'oauth.token.issue'`,
    );
    assert.equal(rows.length, 1, 'one record of the refused secret');
    assert.equal(rows[0]?.actor.id, made.json.client_id);
    assert.equal(rows[0]?.decision.allow, false);
    assert.match(rows[0]?.attrs.refused ?? '', /secret/);
    assert.ok(!JSON.stringify(rows[0]).includes('not-the-secret'), 'the guessed secret is not recorded');
    assert.equal((await guess(made.json.client_secret)).status, 200, 'the right secret still works');
  });

  it("the token endpoint reads a tenant's IPv6 ranges as the edge's policy does: ::/0 and a mapped IPv4 range hold no IPv4 caller", async () => {
    const made = await clientOfNewTenant('atkfin-v6', 'client_secret_post');
    const grant = new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: made.json.client_id,
      client_secret: made.json.client_secret,
    }).toString();
    const first = await token(grant);
    assert.equal(first.status, 200, first.text);
    const ranges = (r: string[]) =>
      tdb.db.query(
        `UPDATE tenants SET security = security || jsonb_build_object('allowed_ip_ranges', $1::jsonb) WHERE id = 'atkfin-v6'`,
        [JSON.stringify(r)],
      );
    // This test's callers reach the gateway over IPv4 loopback.
    await ranges(['::/0']);
    const probe = `/v1/core/accounts/${randomUUID()}`;
    const edge = await eventually(
      () => as(first.json.access_token, 'GET', probe),
      (r) => r.status === 403,
    );
    assert.equal(edge.status, 403, `the edge refuses an IPv4 caller under ::/0: ${edge.text}`);
    const v6only = await token(grant);
    refused(v6only, 400, 'UNAUTHORIZED_CLIENT', 'a token for an IPv4 caller under ::/0');
    // The policy's net.cidr_contains (WASM) reads ::ffff:7f00:0/104 as an IPv6 range, which holds
    // ::ffff:127.0.0.1 but not 127.0.0.1 (test/shared/ip-ranges.test.ts): core refuses it too.
    await ranges(['::ffff:7f00:0/104']);
    refused(await token(grant), 400, 'UNAUTHORIZED_CLIENT', 'an IPv4 caller under a mapped IPv6 range');
    await ranges(['::ffff:7f00:0/104', '127.0.0.0/8']);
    const both = await token(grant);
    assert.equal(both.status, 200, `the IPv4 range beside it: ${both.text}`);
    const used = await eventually(
      () => as(both.json.access_token, 'GET', probe),
      (r) => r.status === 404,
    );
    assert.equal(used.status, 404, `the edge lets it through to core (no such account): ${used.text}`);
  });

  describe("ledger readers on a core whose currency snapshot lags another instance's writes", () => {
    let client: string;
    const tenant = 'demo';

    const openedElsewhere = (currency: string, floor: boolean) =>
      accountOpenedElsewhere(tdb.db, tenant, currency, floor);

    before(async () => {
      const t = await callRetrying(
        gw,
        'POST',
        '/oauth2/token',
        form(
          new URLSearchParams({
            grant_type: 'client_credentials',
            client_id: demo.coreClient.clientId,
            client_secret: demo.coreClient.clientSecret,
            scope: 'core:read core:write',
          }).toString(),
        ),
      );
      assert.equal(t.status, 200, t.text);
      client = t.json.access_token;
    });

    it('an account in a currency this core has not loaded yet shows its balance (as its statement does), not 422', async () => {
      await tdb.db.query(
        `INSERT INTO admin_currencies (code, name, minor_units) VALUES ('MRU', 'Ouguiya', 2)`,
      );
      const id = await openedElsewhere('MRU', true);
      const account = await as(client, 'GET', `/v1/core/accounts/${id}`);
      assert.equal(account.status, 200, account.text);
      const balances = await as(client, 'GET', `/v1/core/accounts/${id}/balances`);
      assert.equal(balances.status, 200, `balances: ${balances.text}`);
      assert.equal(balances.json.posted, '0.00');
      assert.equal(balances.json.currency, 'MRU');
    });

    it('a refused account opening is kept under its key and recorded once; the currency added later opens under a new key', async () => {
      const key = `open-${randomUUID()}`;
      const open = (k: string) =>
        callRetrying(gw, 'POST', '/v1/core/accounts', {
          json: {
            owner_type: 'customer',
            owner_id: 'atkfin-npr',
            product_code: 'WALLET_MAIN',
            currency: 'NPR',
          },
          headers: { authorization: `Bearer ${client}`, 'x-request-id': randomUUID(), 'idempotency-key': k },
        });
      refused(await open(key), 422, 'UNKNOWN_CURRENCY', 'NPR is not in the table');
      const records = () =>
        tdb.db.query<{ decision: { allow: boolean }; attrs: { outcome: string } }>(
          `SELECT decision, attrs FROM audit_log WHERE tenant_id = $1 AND action = 'account.create' AND attrs->>'outcome' <> 'ok'`,
          [tenant],
        );
      const first = await records();
      assert.equal(first.rows.length, 1, 'the refusal is recorded');
      assert.equal(first.rows[0]?.attrs.outcome, 'UNKNOWN_CURRENCY');
      assert.equal(first.rows[0]?.decision.allow, false);
      await tdb.db.query(
        `INSERT INTO admin_currencies (code, name, minor_units) VALUES ('NPR', 'Nepalese Rupee', 2)`,
      );
      const replayed = await open(key);
      refused(replayed, 422, 'UNKNOWN_CURRENCY', 'the same key answers what it answered');
      assert.equal((await records()).rows.length, 1, 'a replay adds no record');
      const opened = await open(`open-${randomUUID()}`);
      assert.equal(opened.status, 201, `a new key opens it: ${opened.text}`);
      const none = await tdb.db.query(
        `SELECT 1 FROM ledger_accounts WHERE tenant_id = $1 AND owner_id = 'atkfin-npr'`,
        [tenant],
      );
      assert.equal(none.rows.length, 1, 'one account, from the new key');
    });

    it("an agent's fallback fee and commission are whole units of a currency without decimals, which the ledger takes", async () => {
      // No fee or commission schedule for UGX in the demo tenant: the fallback table prices it.
      const price = await priceOf(tdb.db, tenant, 'CASHOUT', 12_345n * microPerUnit, 'UGX');
      assert.equal(format(price.fee, 0), '123', 'a 1% fee of 12345 UGX');
      assert.equal(format(price.commission, 0), '49', '40% of that fee');
      const kes = await priceOf(tdb.db, tenant, 'CASHOUT', 12_345n * microPerUnit, 'KES');
      assert.equal(kes.fee % 10_000n, 0n, 'KES keeps whole cents');
    });

    it('amounts in a currency another instance re-scaled and opened accounts in are read with the minor units of the table', async () => {
      const platform = demo.serviceTokens.admin.token;
      const made = await as(platform, 'POST', '/v1/currencies', { code: 'VUV', minor_units: 2 });
      assert.equal(made.status, 201, made.text);
      // Another instance: VUV held no money, so its admin could take the minor units to 0, and
      // then opened accounts in it (its own snapshot is right; this core's still says 2).
      await tdb.db.query(`UPDATE admin_currencies SET minor_units = 0 WHERE code = 'VUV'`);
      const from = await openedElsewhere('VUV', false);
      const to = await openedElsewhere('VUV', true);
      const posted = await as(client, 'POST', '/v1/core/postings', {
        currency: 'VUV',
        entries: [
          { account_id: from, side: 'debit', amount: '10.50' },
          { account_id: to, side: 'credit', amount: '10.50' },
        ],
      });
      refused(posted, 422, 'INVALID_AMOUNT', 'VUV has no minor units: 10.50 is no VUV amount');
      const held = await as(client, 'POST', '/v1/core/holds', {
        debit_account_id: from,
        credit_account_id: to,
        currency: 'VUV',
        amount: '0.5',
      });
      refused(held, 422, 'INVALID_AMOUNT', 'a hold of 0.5 VUV');
      const whole = await as(client, 'POST', '/v1/core/postings', {
        currency: 'VUV',
        entries: [
          { account_id: from, side: 'debit', amount: '10' },
          { account_id: to, side: 'credit', amount: '10' },
        ],
      });
      assert.equal(whole.status, 201, `10 VUV posts: ${whole.text}`);
      const entries = await tdb.db.query<{ amount: string }>(
        `SELECT amount::text FROM ledger_entries WHERE tenant_id = $1 AND account_id = $2`,
        [tenant, to],
      );
      assert.deepEqual(
        entries.rows.map((r) => r.amount),
        ['10.000000'],
        'only the whole amount was stored',
      );
    });
  });
});
