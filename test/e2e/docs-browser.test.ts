/**
 * The docs page works (issue 15 item 3): on the development stack, through the gateway, the
 * seeded demo customer signs in with one call, and in headless Chromium Swagger UI at /v1/docs
 * is authorized with that token and executes `GET /v1/accounts`, rendering 200. The document's
 * own examples (the simulate input, the token endpoint's form, the demo tenant) are answered as
 * a newcomer would send them.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { browserUnavailable, launchBrowser, type TestBrowser } from '../helpers/browser.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { seedDemo } from '../../core/seed.ts';
import { loadOrCreateMasterKey } from '../../shared/sealing.ts';

type Json = Record<string, any>;

const skip = browserUnavailable();

let tdb: TestDb;
let dataDir: string;
let stack: Stack;
let site: string;
let demo: Json;

before(async () => {
  tdb = await freshDatabase({ migrate: false });
  dataDir = await mkdtemp(join(tmpdir(), 'e2e-docs-'));
  const config = loadConfig({
    GATEWAY_PORT: '0',
    CORE_PORT: '0',
    AUTHZ_PORT: '0',
    DATA_DIR: dataDir,
    DATABASE_URL: tdb.url,
    LOG_LEVEL: 'silent',
  });
  stack = await startStack(config, { checkTimeoutMs: 3000 });
  site = `http://localhost:${stack.ports.gateway}`;
  demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Json;
});
after(async () => {
  await stack?.stop();
  await tdb?.drop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

/** The demo customer's access token: one call with demo.json's phone and PIN. */
async function customerToken(): Promise<string> {
  const c = demo.customer as Json;
  const r = await callRetrying(site, 'POST', '/customers/auth/login', {
    json: { tenantId: c.tenantId, phone: c.phone, pin: c.pin },
  });
  assert.equal(r.status, 200, r.text);
  return r.json.accessToken as string;
}

describe("the seeded demo customer and the document's examples", () => {
  it('seeds a customer of the demo tenant whose PIN signs in, and keeps it when the seed runs again', async () => {
    const c = demo.customer as Json;
    assert.equal(c.tenantId, 'demo');
    assert.match(c.phone, /^\+2547\d{8}$/);
    const token = await customerToken();
    const accounts = await callRetrying(site, 'GET', '/v1/accounts', {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(accounts.status, 200, accounts.text);
    assert.equal(accounts.json.items.length, 1, 'the wallet a sign-up opens');
    const { rows } = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'demo' AND action = 'auth.pin_set' AND target->>'id' = $1`,
      [c.customerId],
    );
    assert.equal(rows.length, 1, 'setting the demo PIN is audited');
    // The seed again (the next `npm start`): the same customer and PIN, nothing set twice.
    const keys = new KeyStore(stack.db, await loadOrCreateMasterKey(undefined, join(dataDir, 'master.key')));
    const again = (await seedDemo(stack.db, dataDir, { keys })) as Json;
    assert.deepEqual(again.customer, c);
    const { rows: after } = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'demo' AND action = 'auth.pin_set' AND target->>'id' = $1`,
      [c.customerId],
    );
    assert.equal(after.length, 1);
  });

  it("answers the document's examples as written: tenant, token form, simulate input", async () => {
    const doc = (await callRetrying(site, 'GET', '/v1/openapi.json')).json as Json;
    const tokenOp = doc.paths['/oauth2/token'].post as Json;
    const form = tokenOp.requestBody.content['application/x-www-form-urlencoded'].schema.properties as Json;
    assert.equal(form.client_id.example, demo.coreClient.clientId);
    const issued = await callRetrying(site, 'POST', '/oauth2/token', {
      body: new URLSearchParams({
        grant_type: form.grant_type.const,
        client_id: form.client_id.example,
        client_secret: demo.coreClient.clientSecret,
      }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(issued.status, 200, issued.text);

    const simulate = doc.paths['/v1/auth/simulate'].post as Json;
    const input = simulate.requestBody.content['application/json'].schema.properties.input.example as Json;
    const ops = { authorization: `Bearer ${demo.serviceTokens.ops.token}` };
    const decided = await callRetrying(site, 'POST', '/v1/auth/simulate', { json: { input }, headers: ops });
    assert.equal(decided.status, 200, decided.text);
    assert.equal(decided.json.code, 'MFA_REQUIRED', 'the example is what its description says');
    const viaGet = (doc.paths['/v1/auth/simulate'].get.parameters as Json[]).find((p) => p.name === 'input');
    const decidedGet = await callRetrying(
      site,
      'GET',
      `/v1/auth/simulate?input=${encodeURIComponent(viaGet?.schema.example as string)}`,
      { headers: ops },
    );
    assert.equal(decidedGet.status, 200, decidedGet.text);
    const notInput = await callRetrying(
      site,
      'GET',
      `/v1/auth/simulate?input=${encodeURIComponent('{"tenant":{"id":"demo"}}')}`,
      { headers: ops },
    );
    assert.equal(notInput.status, 400, notInput.text);
    assert.equal(notInput.json.code, 'VALIDATION_FAILED');

    const otpSend = doc.paths['/customers/auth/otp/send'].post.requestBody.content['application/json'].schema
      .properties as Json;
    assert.equal(otpSend.tenantId.example, 'demo');
  });
});

describe('the docs page in a browser', { skip: skip ?? false }, () => {
  let browser: TestBrowser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
  });

  it('authorizes with a customer token, tries GET /v1/accounts and renders 200', async () => {
    const token = await customerToken();
    const page = await browser.browser.newPage();
    // `?filter=transfers`: only that tag is drawn (the whole document is some 240 operations).
    const served = await page.goto(`${site}/v1/docs?filter=transfers`);
    assert.equal(served?.status(), 200);
    const operation = page.locator('#operations-transfers-myAccounts');
    await operation.waitFor({ timeout: 120_000 });
    assert.equal(
      await page.locator('#operations-tag-platform').count(),
      0,
      'the filter left the other tags out',
    );

    await page.locator('.btn.authorize').first().click();
    const scheme = page.locator('.auth-container', {
      has: page.locator('h4', { hasText: 'customerBearer' }),
    });
    await scheme.locator('input').fill(token);
    await scheme.locator('button.authorize').click();
    await page.locator('.btn-done').first().click();

    await operation.locator('.opblock-summary').first().click();
    await operation.locator('.try-out__btn').click();
    // Swagger UI sends the scheme's header: the edge answers 401 without it.
    const answered = page.waitForResponse((res) => new URL(res.url()).pathname === '/v1/accounts');
    await operation.locator('.execute').click();
    const response = await answered;
    assert.equal(response.status(), 200, await response.text());
    assert.match(response.request().headers().authorization ?? '', /^Bearer /);
    const status = operation.locator('.live-responses-table .response .response-col_status').first();
    await status.waitFor();
    assert.equal((await status.innerText()).trim(), '200');
    assert.match(
      await operation
        .locator('.live-responses-table .response .response-col_description')
        .first()
        .innerText(),
      /"items"/,
    );
  });
});
