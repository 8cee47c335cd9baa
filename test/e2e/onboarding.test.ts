/**
 * Issue 20 item 1, end to end through the dev gateway with no SQL write after the bootstrap
 * (the development seed): a platform admin (the operator tenant's Admin, software passkey)
 * creates tenant B and, at AAL 2, issues its first Admin's enrolment link and its SCIM
 * credential; B's Admin enrols a passkey, provisions a staff member by SCIM, registers a core
 * OAuth client, creates an outlet and an agent (who signs in with the credentials it was given),
 * sets B's security settings (If-Match), copies the platform's fee and limit templates and
 * activates them; two customers of B enrol and one pays the other with its step-up. Then every
 * credential of B is refused on A, and A's on B. The database is only read (balances, the audit).
 */
import assert from 'node:assert/strict';
import { createPrivateKey, randomUUID, sign } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { eventually, type Res } from '../helpers/http.ts';
import { journey } from '../helpers/journey.ts';
import { SoftAuthenticator } from '../helpers/soft-authenticator.ts';

interface DemoFile {
  staff: { admin: { userId: string; enrolmentLink: { token: string } } };
  serviceTokens: Record<'admin', { token: string }>;
  coreClient: { clientId: string; clientSecret: string };
  settlementAccounts: Record<string, string>;
}

const A = 'demo';
const B = 'acme-b';
const userSchema = 'urn:ietf:params:scim:schemas:core:2.0:User';

describe('a second tenant from zero to a transfer, through the gateway only', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: DemoFile;

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-onboarding-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as DemoFile;
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const send = (
    method: string,
    path: string,
    token: string | undefined,
    json?: unknown,
    extra: Record<string, string> = {},
  ): Promise<Res> =>
    callRetrying(gw, method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        'x-request-id': randomUUID(),
        ...extra,
      },
    });
  const created = (r: Res, what: string) => assert.equal(r.status, 201, `${what}: ${r.text}`);

  /** A staff member with a passkey: enrol from the link, sign in. */
  async function enrolAndSignIn(
    tenantId: string,
    token: string,
  ): Promise<{ auth: SoftAuthenticator; access: string }> {
    const auth = new SoftAuthenticator(`http://localhost:${stack.ports.gateway}`);
    const begun = await send('POST', '/auth/enrolment/begin', undefined, { tenantId, token });
    assert.equal(begun.status, 200, begun.text);
    const enrolled = await send('POST', '/auth/enrolment/finish', undefined, {
      tenantId,
      token,
      response: auth.register(begun.json.options),
    });
    created(enrolled, 'enrolment');
    return { auth, access: await signIn(tenantId, auth) };
  }

  async function signIn(tenantId: string, auth: SoftAuthenticator): Promise<string> {
    const lb = await send('POST', '/auth/login', undefined, { method: 'passkey', step: 'begin', tenantId });
    assert.equal(lb.status, 200, lb.text);
    const login = await send('POST', '/auth/login', undefined, {
      method: 'passkey',
      step: 'finish',
      tenantId,
      response: auth.assert(lb.json.options),
    });
    assert.equal(login.status, 200, login.text);
    return login.json.accessToken;
  }

  /**
   * A request the registry marks AAL 2 for staff: refused at AAL 1 with MFA_REQUIRED, then made
   * with a passkey step-up bound to this very request (method, path, body).
   */
  async function stepped(
    who: { auth: SoftAuthenticator; access: string },
    method: string,
    path: string,
    json: unknown,
    extra: Record<string, string> = {},
  ): Promise<Res> {
    const headers = { 'idempotency-key': `k-${randomUUID()}`, ...extra };
    const first = await send(method, path, who.access, json, headers);
    assert.equal(first.status, 403, `${method} ${path} at AAL 1: ${first.text}`);
    assert.equal(first.json.code, 'MFA_REQUIRED');
    const ch = await send('POST', '/auth/mfa/challenge', who.access, {
      method,
      path,
      body: JSON.stringify(json),
    });
    assert.equal(ch.status, 200, ch.text);
    const up = await send('POST', '/auth/mfa/complete', who.access, {
      challengeToken: ch.json.challenge,
      response: who.auth.assert(ch.json.publicKey),
    });
    assert.equal(up.status, 200, up.text);
    return send(method, path, up.json.accessToken, json, headers);
  }

  const key = () => ({ 'idempotency-key': `k-${randomUUID()}` });
  /** 403 from the edge (the request names another tenant), 404 from core (another tenant's resource is not revealed). */
  const refused = (r: Res, status: 403 | 404, what: string) =>
    assert.equal(r.status, status, `${what}: ${r.text}`);

  it('onboards tenant B through the API; its customer pays; no credential crosses between A and B', async () => {
    // --- the platform admin (the operator tenant's first Admin, from the bootstrap's link)
    const platform = await enrolAndSignIn(A, demo.staff.admin.enrolmentLink.token);
    const tenant = await send(
      'POST',
      '/v1/tenants',
      platform.access,
      { id: B, name: 'Acme B', country: 'KE', baseCurrency: 'KES' },
      key(),
    );
    created(tenant, 'tenant');
    const settlement = tenant.json.settlementAccountId as string;
    // A staff token names the tenants its member's tenant owns as of its issue: sign in again.
    platform.access = await signIn(A, platform.auth);
    const firstAdmin = await stepped(platform, 'POST', `/v1/tenants/${B}/first-admin`, {
      userName: 'admin@acme-b.example',
      displayName: 'B Admin',
    });
    created(firstAdmin, 'first admin');
    assert.equal(firstAdmin.headers['cache-control'], 'no-store');
    assert.match(firstAdmin.json.link.path, new RegExp(`^/staff#tenant=${B}&enrol=enr_`));
    const scimCred = await stepped(platform, 'POST', `/v1/tenants/${B}/scim-credentials`, {
      name: 'acme idp',
    });
    created(scimCred, 'SCIM credential');
    // Only a tenant the operator created: not one it does not own, not the operator's own.
    const notOwned = await send(
      'POST',
      `/v1/tenants/nobody-${randomUUID().slice(0, 6)}/first-admin`,
      platform.access,
      { userName: 'x@example.com' },
      key(),
    );
    assert.equal(notOwned.status, 403, notOwned.text);
    assert.equal(notOwned.json.code, 'POLICY_DENIED', 'refused at the edge, before any step-up');
    const own = await stepped(platform, 'POST', `/v1/tenants/${A}/first-admin`, {
      userName: 'x@example.com',
    });
    assert.equal(own.status, 404, own.text);
    // The platform publishes the templates every tenant may copy.
    const feeTemplate = await send(
      'POST',
      '/v1/schedule-templates',
      platform.access,
      {
        name: 'KE standard transfer fees',
        kind: 'FEE',
        product: 'TRANSFER',
        currency: 'KES',
        items: [
          { min_amount: '0', max_amount: '1000', fixed: '10' },
          { min_amount: '1000', percent_bps: 100, fee_min: '15', fee_max: '300' },
        ],
      },
      key(),
    );
    created(feeTemplate, 'fee template');
    const limitTemplate = await send(
      'POST',
      '/v1/schedule-templates',
      platform.access,
      {
        name: 'KE standard transfer limits',
        kind: 'LIMIT',
        product: 'TRANSFER',
        currency: 'KES',
        items: [
          { action: 'TRANSFER', period: 'transaction', max_amount: '150000' },
          { action: 'TRANSFER', period: 'day', max_amount: '300000', max_count: 20 },
        ],
      },
      key(),
    );
    created(limitTemplate, 'limit template');

    // --- B's own Admin
    const admin = await enrolAndSignIn(B, firstAdmin.json.link.token);
    const scimAs = (token: string) => (method: string, path: string, json?: unknown) =>
      callRetrying(gw, method, path, {
        ...(json !== undefined ? { json } : {}),
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json' },
      });
    const scimB = scimAs(scimCred.json.token);
    const member = await scimB('POST', '/scim/v2/Users', {
      schemas: [userSchema],
      userName: 'ops@acme-b.example',
      active: true,
    });
    created(member, 'SCIM user');

    const client = await stepped(admin, 'POST', '/v1/oauth-clients', {
      name: 'acme core',
      scopes: ['core:read', 'core:write'],
      token_endpoint_auth_method: 'client_secret_post',
    });
    created(client, 'OAuth client');
    const serviceToken = await stepped(admin, 'POST', '/v1/service-tokens', {
      name: 'acme ops',
      roles: ['ops'],
    });
    created(serviceToken, 'service token');

    const outlet = await send(
      'POST',
      '/v1/outlets',
      admin.access,
      { name: 'Acme Kiosk 1', region: 'Nairobi', address: 'Moi Avenue' },
      key(),
    );
    created(outlet, 'outlet');
    const badAgent = await stepped(admin, 'POST', '/v1/agents', {
      code: 'ACME0001',
      phone: '+254722000101',
      name: 'Acme Agent',
      outletId: randomUUID(),
    });
    assert.equal(badAgent.status, 404, badAgent.text);
    assert.equal(badAgent.json.code, 'OUTLET_NOT_FOUND');
    const agent = await stepped(admin, 'POST', '/v1/agents', {
      code: 'ACME0001',
      phone: '+254722000101',
      name: 'Acme Agent',
      outletId: outlet.json.id,
    });
    created(agent, 'agent');
    assert.equal(agent.headers['cache-control'], 'no-store');
    const { pin, deviceId, privateKey } = agent.json.credentials;
    const timestamp = String(Date.now());
    const proof = sign(
      null,
      Buffer.from(`agent-login|${B}|ACME0001|${deviceId}|${timestamp}`),
      createPrivateKey({ key: privateKey, format: 'jwk' }),
    ).toString('base64url');
    const agentLogin = await send('POST', '/v1/agent/auth/login', undefined, {
      tenantId: B,
      agentCode: 'ACME0001',
      pin,
      device: { deviceId, timestamp, signature: proof },
    });
    assert.equal(agentLogin.status, 200, `the agent signs in with what it was given: ${agentLogin.text}`);
    const { rows: audited } = await tdb.db.query<{ attrs: unknown }>(
      `SELECT attrs FROM audit_log WHERE tenant_id = $1 AND action = 'agent.create'`,
      [B],
    );
    assert.equal(audited.length, 1);
    assert.ok(
      !JSON.stringify(audited).includes(pin) && !JSON.stringify(audited).includes(privateKey.d),
      'no credential in the audit',
    );

    // Security settings: If-Match required, validated, then in force (a new device key usable at once).
    const sec = await send('GET', `/v1/tenants/${B}/security`, admin.access);
    assert.equal(sec.status, 200, sec.text);
    assert.equal(sec.json.device_cooloff_hours, 24);
    const wanted = {
      ...sec.json,
      device_cooloff_hours: 0,
      session_timeout_minutes: 20,
      resident_regions: ['KE'],
      address_throttle: { ...sec.json.address_throttle, failures: 200 },
    };
    assert.equal((await stepped(admin, 'PUT', `/v1/tenants/${B}/security`, wanted)).status, 428);
    const invalid = await stepped(
      admin,
      'PUT',
      `/v1/tenants/${B}/security`,
      { ...wanted, allowed_ip_ranges: ['not-a-cidr/8'] },
      { 'if-match': sec.headers.etag ?? '' },
    );
    assert.equal(invalid.status, 422, invalid.text);
    assert.equal(invalid.json.code, 'SECURITY_INVALID');
    const put = await stepped(admin, 'PUT', `/v1/tenants/${B}/security`, wanted, {
      'if-match': sec.headers.etag ?? '',
    });
    assert.equal(put.status, 200, put.text);
    assert.equal(
      (
        await stepped(admin, 'PUT', `/v1/tenants/${B}/security`, wanted, {
          'if-match': sec.headers.etag ?? '',
        })
      ).status,
      412,
      'a stale ETag',
    );
    assert.deepEqual((await send('GET', `/v1/tenants/${B}/security`, admin.access)).json, wanted);

    // Fee and limit schedules copied from the platform's templates, then activated.
    const publishB = await send(
      'POST',
      '/v1/schedule-templates',
      admin.access,
      {
        name: 'mine',
        kind: 'LIMIT',
        product: 'TRANSFER',
        currency: 'KES',
        items: [{ action: 'TRANSFER', period: 'day', max_amount: '1' }],
      },
      key(),
    );
    assert.equal(publishB.status, 403, `only platform admins publish templates: ${publishB.text}`);
    // A template naming a product or currency B does not have is refused whole, naming what is
    // missing (nothing copied); B's Admin adds the product through the API, as a tenant does.
    const usdTemplate = await send(
      'POST',
      '/v1/schedule-templates',
      platform.access,
      {
        name: 'USD transfer fees',
        kind: 'FEE',
        product: 'TRANSFER',
        currency: 'USD',
        items: [{ min_amount: '0', fixed: '1' }],
      },
      key(),
    );
    created(usdTemplate, 'USD fee template');
    const copyOf = (id: string) => send('POST', `/v1/schedule-templates/${id}:copy`, admin.access, {}, key());
    const notApplicable = async (id: string, missing: Record<string, string>) => {
      const r = await copyOf(id);
      assert.equal(r.status, 422, r.text);
      assert.equal(r.json.code, 'TEMPLATE_NOT_APPLICABLE');
      assert.deepEqual(r.json.missing, missing);
      for (const what of Object.values(missing)) assert.ok(r.json.detail.includes(what), r.text);
    };
    await notApplicable(feeTemplate.json.id, { product: 'TRANSFER' });
    await notApplicable(usdTemplate.json.id, { product: 'TRANSFER', currency: 'USD' });
    created(
      await send('POST', '/v1/products', admin.access, { code: 'TRANSFER', category: 'PAYMENTS' }, key()),
      'product',
    );
    await notApplicable(usdTemplate.json.id, { currency: 'USD' });
    const copiedNothing = await tdb.db.query('SELECT 1 FROM admin_schedules WHERE tenant_id = $1', [B]);
    assert.equal(copiedNothing.rows.length, 0, 'a refused copy leaves no schedule behind');
    const templates = await send('GET', '/v1/schedule-templates?currency=KES', admin.access);
    assert.equal(templates.status, 200, templates.text);
    for (const id of [feeTemplate.json.id, limitTemplate.json.id]) {
      assert.ok(templates.json.items.some((t: { id: string }) => t.id === id));
      const copy = await send('POST', `/v1/schedule-templates/${id}:copy`, admin.access, {}, key());
      created(copy, 'copied schedule');
      assert.equal(copy.json.status, 'INACTIVE');
      assert.equal(copy.json.scopeRef, B);
      const got = await send('GET', `/v1/schedules/${copy.json.id}`, admin.access);
      const on = await send(
        'PATCH',
        `/v1/schedules/${copy.json.id}`,
        admin.access,
        { status: 'ACTIVE' },
        { 'if-match': got.headers.etag ?? '' },
      );
      assert.equal(on.status, 200, on.text);
    }

    // --- B's customers: sign up (the device key usable at once: cool-off 0), fund, pay with a step-up.
    const j = journey(
      gw,
      dataDir,
      tdb.db,
      {
        coreClient: { clientId: client.json.client_id, clientSecret: client.json.client_secret },
        settlementAccounts: { KES: settlement },
      },
      { tenantId: B, call: callRetrying },
    );
    const alice = await j.signUp('+254733000201', { coolOff: false });
    const bob = await j.signUp('+254733000202', { coolOff: false });
    await j.fund(alice.wallet, '2000.00');
    const payee = await j.addPayee(alice, bob.phone, 'Bob');
    created(payee, 'payee');
    const t = await j.transfer(alice, payee.json.id, '500.00', 'device');
    assert.equal(t.first.json?.code, 'MFA_REQUIRED');
    assert.equal(t.final.status, 200, t.final.text);
    assert.equal(t.final.json.fee, '10.00');
    const confirmed = await callRetrying(gw, 'POST', '/v1/transfers/confirm', {
      json: { transferId: t.final.json.id },
      headers: { ...j.bearer(alice, t.token), 'idempotency-key': `cf-${randomUUID()}` },
    });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal(confirmed.json.status, 'POSTED');
    assert.equal(await j.balance(bob.wallet), 500_000_000n);
    assert.equal(await j.balance(alice.wallet), 1_490_000_000n);

    // --- no credential crosses: B's on A, A's on B (naming the other tenant, or its resources)
    const jA = journey(gw, dataDir, tdb.db, demo, { call: callRetrying });
    const carol = await jA.signUp('+254733000301', { coolOff: false });
    const coreToken = async (clientId: string, secret: string) => {
      const r = await callRetrying(gw, 'POST', '/oauth2/token', {
        json: {
          grant_type: 'client_credentials',
          client_id: clientId,
          client_secret: secret,
          scope: 'core:read',
        },
      });
      assert.equal(r.status, 200, r.text);
      return r.json.access_token as string;
    };
    const coreB = await coreToken(client.json.client_id, client.json.client_secret);
    const coreA = await coreToken(demo.coreClient.clientId, demo.coreClient.clientSecret);
    // customer tokens
    refused(
      await callRetrying(gw, 'GET', `/v1/accounts?tenantId=${A}`, { headers: j.bearer(alice) }),
      403,
      "B's customer on A",
    );
    refused(
      await callRetrying(gw, 'GET', `/v1/accounts?tenantId=${B}`, { headers: jA.bearer(carol) }),
      403,
      "A's customer on B",
    );
    // staff tokens (the platform admin's owner rights reach B's owner actions only)
    refused(await send('GET', `/v1/tenants/${A}`, admin.access), 403, "B's Admin on A");
    refused(await send('GET', `/v1/tenants/${A}/security`, admin.access), 403, "B's Admin on A's security");
    refused(
      await send('GET', `/v1/schedules?tenantId=${B}`, platform.access),
      403,
      "A's Admin on B's schedules",
    );
    // SCIM credentials
    refused(
      await scimB('GET', `/scim/v2/Users/${demo.staff.admin.userId}`),
      404,
      "B's SCIM credential on A's staff",
    );
    refused(await scimB('GET', `/scim/v2/Users?tenantId=${A}`), 403, "B's SCIM credential naming A");
    const scimA = await stepped(platform, 'POST', '/v1/scim-credentials', { name: 'demo idp' });
    created(scimA, "A's SCIM credential");
    refused(
      await scimAs(scimA.json.token)('GET', `/scim/v2/Users/${member.json.id}`),
      404,
      "A's SCIM credential on B's staff",
    );
    assert.equal(
      (await scimB('GET', `/scim/v2/Users/${member.json.id}`)).status,
      200,
      "B's SCIM credential reads B's staff",
    );
    assert.equal(
      (await scimAs(scimA.json.token)('GET', `/scim/v2/Users/${demo.staff.admin.userId}`)).status,
      200,
      "A's reads A's",
    );
    // OAuth client tokens
    refused(
      await send('GET', `/v1/core/accounts/${demo.settlementAccounts.KES}`, coreB),
      404,
      "B's core client on A's account",
    );
    refused(
      await send('GET', `/v1/core/accounts/${settlement}`, coreA),
      404,
      "A's core client on B's account",
    );
    assert.equal(
      (await send('GET', `/v1/core/accounts/${settlement}`, coreB)).status,
      200,
      "B's core client reads B's account",
    );
    // service tokens
    refused(
      await send('GET', `/v1/schedules?tenantId=${A}`, serviceToken.json.token),
      403,
      "B's service token on A",
    );
    refused(
      await send('GET', `/v1/schedules?tenantId=${B}`, demo.serviceTokens.admin.token),
      403,
      "A's service token on B",
    );
    assert.equal(
      (await send('GET', '/v1/schedules', serviceToken.json.token)).status,
      200,
      "B's service token reads B's schedules",
    );

    // The edge applies a settings change from its NOTIFY: the platform (owner) limits B to an
    // address range this client is outside of, and B's next request is refused at the edge.
    const current = await send('GET', `/v1/tenants/${B}/security`, platform.access);
    assert.equal(current.status, 200, current.text);
    const fenced = await stepped(
      platform,
      'PUT',
      `/v1/tenants/${B}/security`,
      { ...current.json, allowed_ip_ranges: ['10.0.0.0/8'] },
      { 'if-match': current.headers.etag ?? '' },
    );
    assert.equal(fenced.status, 200, fenced.text);
    const outside = await eventually(
      () => send('GET', '/v1/schedules', serviceToken.json.token),
      (r) => r.status === 403,
    );
    assert.equal(outside.status, 403, outside.text);
    assert.match(outside.text, /tenant_ip_ranges/);
  });
});
