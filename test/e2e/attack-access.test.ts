/**
 * Attacks from outside on yesterday's access changes: core's own re-check of OAuth client
 * tokens on /v1/core (revocation, proof of possession, tenant state), the token endpoint of a
 * suspended or address-restricted tenant, a suspended tenant's staff routes, and account opening
 * against admin's currency table. Each case is a hole found by trying it, kept so it stays closed.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { issueScimCredential } from '../../core/staff/credentials.ts';
import { createEnrolmentLink } from '../../core/staff/enrolment.ts';
import type { KeyStore } from '../../core/keys/keys.ts';
import type { TestDb } from '../helpers/db.ts';
import { dpopCall, dpopKey, proof } from '../helpers/dpop.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { call, eventually, type Res } from '../helpers/http.ts';
import { tenantWithAdmin as createTenant } from '../helpers/tenants.ts';
import type { Demo } from '../helpers/journey.ts';
import { addStaff, stackKeys } from '../staff/fixtures.ts';

type DemoFile = Demo & {
  serviceTokens: Record<'admin', { token: string }>;
  coreClient: { clientId: string; clientSecret: string };
  settlementAccounts: Record<string, string>;
};

describe('attacks on OAuth client access, suspended tenants and account currencies', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let core: string;
  let demo: DemoFile;
  let keys: KeyStore;

  const form = (fields: Record<string, string>) => ({
    body: new URLSearchParams(fields).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  const secretGrant = (c: { clientId: string; clientSecret: string }, scope = 'core:read') =>
    form({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret, scope });
  /** A request with `token` (a service or client token) through the gateway. */
  const as = (token: string, method: string, path: string, json?: unknown, origin = gw): Promise<Res> => {
    const headers = {
      authorization: `Bearer ${token}`,
      'x-request-id': randomUUID(),
      'idempotency-key': `k-${randomUUID()}`,
    };
    return callRetrying(origin, method, path, json === undefined ? { headers } : { json, headers });
  };
  const refused = (r: Res, status: number, code: string, what: string) => {
    assert.equal(r.status, status, `${what}: ${r.status} ${r.text}`);
    assert.equal(r.json?.code, code, `${what}: ${r.text}`);
  };
  /** A tenant the platform created, and a service token of its own Admin. */
  const tenantWithAdmin = (id: string): Promise<string> =>
    createTenant(gw, demo.serviceTokens.admin.token, tdb.db, id);
  /** A secret client its tenant's Admin registered through the gateway. */
  const secretClient = async (admin: string): Promise<{ clientId: string; clientSecret: string }> => {
    const r = await as(admin, 'POST', '/v1/oauth-clients', {
      name: 'payouts',
      scopes: ['core:read'],
      token_endpoint_auth_method: 'client_secret_post',
    });
    assert.equal(r.status, 201, r.text);
    return { clientId: r.json.client_id, clientSecret: r.json.client_secret };
  };
  const tokenAt = (origin: string, c: { clientId: string; clientSecret: string }) =>
    callRetrying(origin, 'POST', '/oauth2/token', secretGrant(c));
  /** A new tenant, its Admin, a secret client the Admin registered, and a token it was issued. */
  const liveClient = async (id: string) => {
    const admin = await tenantWithAdmin(id);
    const client = await secretClient(admin);
    const t = await tokenAt(gw, client);
    assert.equal(t.status, 200, t.text);
    return { admin, client, token: t.json.access_token as string };
  };
  /** A read any live client of any tenant may make: 404 for an account nobody has. */
  const probe = () => `/v1/core/accounts/${randomUUID()}`;

  before(async () => {
    e2e = await startE2eStack('atkaccess');
    ({ tdb, gw, core } = e2e);
    demo = e2e.demo as DemoFile;
    keys = await stackKeys(tdb.db, e2e.dataDir);
  });
  after(() => e2e?.stop());

  it('a DPoP-bound client token is refused on core reached directly without a proof by its key', async () => {
    const key = await dpopKey();
    const pop = dpopCall(key);
    const issued = await pop(gw, 'POST', '/oauth2/token', secretGrant(demo.coreClient));
    assert.equal(issued.status, 200, issued.text);
    assert.equal(issued.json.token_type, 'DPoP');
    const token = issued.json.access_token as string;
    const path = `/v1/core/accounts/${demo.settlementAccounts.KES}`;
    // Through the edge with its proof: the edge checked it (and used its jti up), core trusts that.
    const edge = await pop(gw, 'GET', path, { headers: { authorization: `DPoP ${token}` } });
    assert.equal(edge.status, 200, edge.text);
    const direct = (headers: Record<string, string>) => call(core, 'GET', path, { headers });
    refused(
      await direct({ authorization: `Bearer ${token}` }),
      401,
      'invalid_dpop_proof',
      'as a bearer token',
    );
    refused(await direct({ authorization: `DPoP ${token}` }), 401, 'invalid_dpop_proof', 'with no proof');
    const other = await dpopKey();
    const forged = await proof(other, 'GET', `${core}${path}`, { accessToken: token });
    refused(
      await direct({ authorization: `DPoP ${token}`, dpop: forged }),
      401,
      'invalid_dpop_proof',
      "with another key's proof",
    );
    const own = await proof(key, 'GET', `${core}${path}`, { accessToken: token });
    const proved = await direct({ authorization: `DPoP ${token}`, dpop: own });
    assert.equal(proved.status, 200, `with its own proof: ${proved.text}`);
    refused(
      await direct({ authorization: `DPoP ${token}`, dpop: own }),
      401,
      'invalid_dpop_proof',
      'proof replayed',
    );
  });

  it('a certificate-bound client token is refused on core reached directly (no certificate there)', async () => {
    const c = demo.coreClient;
    const token = await keys.sign(
      'demo',
      {
        sub: c.clientId,
        aud: 'core',
        client_id: c.clientId,
        scope: 'core:read',
        scp: ['core:read'],
        jti: randomUUID(),
        cnf: { 'x5t#S256': 'x'.repeat(43) },
      },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    const path = `/v1/core/accounts/${demo.settlementAccounts.KES}`;
    refused(await as(token, 'GET', path), 401, 'invalid_token', 'at the edge, no certificate');
    refused(await as(token, 'GET', path, undefined, core), 401, 'invalid_token', 'in core, no certificate');
  });

  it("a revoked, deleted or other tenant's client token is refused through the edge and in core", async () => {
    const { admin, client, token } = await liveClient('atkacc-rev');
    assert.equal((await as(token, 'GET', probe())).status, 404, 'live: the account is just not there');
    const refusedAtEdgeAndCore = async (t: string, what: string) => {
      for (const origin of [gw, core])
        refused(await as(t, 'GET', probe(), undefined, origin), 401, 'invalid_token', `${what} at ${origin}`);
    };
    // A token of another tenant naming this client (signed with that tenant's key).
    const foreign = await keys.sign(
      'demo',
      { sub: client.clientId, aud: 'core', scope: 'core:read', jti: randomUUID() },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    await refusedAtEdgeAndCore(foreign, 'a token of another tenant');
    const revoked = await as(admin, 'DELETE', `/v1/oauth-clients/${client.clientId}`);
    assert.ok(revoked.status < 300, revoked.text);
    await refusedAtEdgeAndCore(token, 'a revoked client');
    refused(await tokenAt(gw, client), 401, 'INVALID_CLIENT', 'a revoked client gets no new token');
    await tdb.db.query('DELETE FROM oauth_clients WHERE client_id = $1', [client.clientId]);
    refused(await as(token, 'GET', probe(), undefined, core), 401, 'invalid_token', 'deleted, in core');
  });

  it("a suspended tenant's client gets no new token and its tokens stop in core too", async () => {
    const { client, token } = await liveClient('atkacc-susp');
    const platform = demo.serviceTokens.admin.token;
    assert.equal((await as(platform, 'POST', '/v1/tenants/atkacc-susp:suspend')).status, 200);
    for (const origin of [gw, core]) {
      const r = await tokenAt(origin, client);
      refused(r, 400, 'UNAUTHORIZED_CLIENT', `a new token at ${origin}`);
      assert.equal(r.json.error, 'unauthorized_client');
    }
    const denied = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'atkacc-susp' AND action = 'oauth.token.issue' AND decision->>'allow' = 'false'`,
    );
    assert.equal(denied.rows.length, 2, 'each refusal is audited');
    const edge = await eventually(
      () => as(token, 'GET', probe()),
      (r) => r.status === 403,
    );
    assert.equal(edge.status, 403, `the edge: ${edge.text}`);
    refused(await as(token, 'GET', probe(), undefined, core), 403, 'FORBIDDEN', 'core reached directly');
    assert.equal((await as(platform, 'POST', '/v1/tenants/atkacc-susp:activate')).status, 200);
    assert.equal((await tokenAt(gw, client)).status, 200, 'active again: tokens again');
  });

  it("a token is issued only inside the tenant's allowed IP ranges, and used only there in core", async () => {
    const { client, token } = await liveClient('atkacc-ip');
    // The gateway's clients are on loopback: a range without it puts this caller outside.
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"allowed_ip_ranges": ["10.0.0.0/8"]}' WHERE id = 'atkacc-ip'`,
    );
    const r = await tokenAt(gw, client);
    refused(r, 400, 'UNAUTHORIZED_CLIENT', 'a token request from outside the ranges');
    assert.match(r.json.error_description, /allowed IP ranges/);
    refused(await tokenAt(core, client), 400, 'UNAUTHORIZED_CLIENT', 'core reached directly (no address)');
    refused(await as(token, 'GET', probe(), undefined, core), 403, 'FORBIDDEN', 'using a token in core');
    const edge = await eventually(
      () => as(token, 'GET', probe()),
      (x) => x.status === 403,
    );
    assert.equal(edge.status, 403, `the edge: ${edge.text}`);
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"allowed_ip_ranges": ["127.0.0.0/8", "::1/128"]}' WHERE id = 'atkacc-ip'`,
    );
    assert.equal((await tokenAt(gw, client)).status, 200, 'inside the ranges');
  });

  it("a suspended tenant's staff cannot enrol a passkey, nor its SCIM client provision, nor its Admin register clients", async () => {
    const admin = await tenantWithAdmin('atkacc-enrol');
    const member = await addStaff(tdb.db, 'atkacc-enrol', 'enrol@atkacc.example', ['admin']);
    const link = await tdb.db.tx((q) =>
      createEnrolmentLink(q, 'atkacc-enrol', member, { type: 'test', id: 'attack-access' }),
    );
    const scim = (
      await tdb.db.tx((q) => issueScimCredential(q, 'atkacc-enrol', 'idp', 'attack-access', Date.now()))
    ).token;
    const begin = (origin: string) =>
      callRetrying(origin, 'POST', '/auth/enrolment/begin', {
        json: { tenantId: 'atkacc-enrol', token: link.token },
      });
    assert.equal((await begin(gw)).status, 200, 'active: the link works');
    assert.equal((await as(scim, 'GET', '/scim/v2/Users')).status, 200, 'active: SCIM works');
    const platform = demo.serviceTokens.admin.token;
    assert.equal((await as(platform, 'POST', '/v1/tenants/atkacc-enrol:suspend')).status, 200);
    for (const origin of [gw, core]) {
      const r = await eventually(
        () => begin(origin),
        (x) => x.status === 403,
      );
      assert.equal(r.status, 403, `enrolment at ${origin}: ${r.text}`);
      // Core refuses the enrolment from its own read of the tenant; the edge refuses SCIM once its
      // listener has applied tenants_changed (milliseconds, longer on a loaded machine).
      const users = await eventually(
        () => as(scim, 'GET', '/scim/v2/Users', undefined, origin),
        (x) => x.status === 401 || x.status === 403,
      );
      assert.ok(users.status === 401 || users.status === 403, `SCIM at ${origin}: ${users.text}`);
    }
    const registered = await as(admin, 'POST', '/v1/oauth-clients', {
      name: 'late',
      scopes: ['core:read'],
      token_endpoint_auth_method: 'client_secret_post',
    });
    assert.equal(registered.status, 403, `client registration: ${registered.text}`);
  });

  describe('opening accounts against admin currency table', () => {
    let clientToken: string;
    const open = (currency: string, owner = `acc-${randomUUID()}`) =>
      as(clientToken, 'POST', '/v1/core/accounts', {
        owner_type: 'customer',
        owner_id: owner,
        product_code: 'WALLET_MAIN',
        currency,
      });
    before(async () => {
      const t = await callRetrying(
        gw,
        'POST',
        '/oauth2/token',
        secretGrant(demo.coreClient, 'core:read core:write'),
      );
      assert.equal(t.status, 200, t.text);
      clientToken = t.json.access_token;
    });

    it('a currency another instance added after this core loaded its snapshot opens accounts at once', async () => {
      await tdb.db.query(
        `INSERT INTO admin_currencies (code, name, minor_units) VALUES ('MNT', 'Tugrik', 2)`,
      );
      const r = await open('MNT');
      assert.equal(r.status, 201, r.text);
      assert.equal(r.json.currency, 'MNT');
    });

    it("amounts in a currency another instance re-scaled are read with the table's minor units once an account holds it", async () => {
      const platform = demo.serviceTokens.admin.token;
      const made = await as(platform, 'POST', '/v1/currencies', { code: 'ISK', minor_units: 2 });
      assert.equal(made.status, 201, made.text);
      // Another instance's admin: ISK holds no money yet, so its minor units may still change.
      await tdb.db.query(`UPDATE admin_currencies SET minor_units = 0 WHERE code = 'ISK'`);
      const a = await open('ISK');
      const b = await open('ISK');
      assert.equal(a.status, 201, a.text);
      assert.equal(b.status, 201, b.text);
      const posted = await as(clientToken, 'POST', '/v1/core/postings', {
        currency: 'ISK',
        entries: [
          { account_id: a.json.id, side: 'debit', amount: '10.50' },
          { account_id: b.json.id, side: 'credit', amount: '10.50' },
        ],
      });
      refused(posted, 422, 'INVALID_AMOUNT', 'ISK has no minor units now: 10.50 is no ISK amount');
    });

    it('a currency removed from the table, or named in lower case, opens nothing', async () => {
      const platform = demo.serviceTokens.admin.token;
      const made = await as(platform, 'POST', '/v1/currencies', { code: 'LSL' });
      assert.equal(made.status, 201, made.text);
      await tdb.db.query(`DELETE FROM admin_currencies WHERE code = 'LSL'`);
      refused(await open('LSL'), 422, 'UNKNOWN_CURRENCY', 'removed by another instance');
      const lower = await open('usd');
      assert.equal(lower.status, 400, lower.text);
      const none = await tdb.db.query(`SELECT 1 FROM ledger_accounts WHERE currency IN ('LSL', 'usd')`);
      assert.equal(none.rows.length, 0);
    });
  });
});
