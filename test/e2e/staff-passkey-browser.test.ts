/**
 * The staff sign-in page in headless Chromium with a virtual authenticator (issue 16 item 3),
 * everything through the dev gateway at http://localhost:<port> (a passkey's relying party is a
 * domain, never an IP address): the demo seed's enrolment link registers a passkey, the person
 * signs in, sees their passkeys and sessions, confirms a sensitive action, and signs out.
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

const skip = browserUnavailable();

describe('staff passkeys in a browser, through the gateway', { skip: skip ?? false }, () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let browser: TestBrowser;
  let site: string;
  let enrolmentPath: string;

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-staff-browser-'));
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
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      staff: { admin: { enrolmentPath: string } };
    };
    enrolmentPath = demo.staff.admin.enrolmentPath;
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await stack?.stop();
    await tdb?.drop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('enrols from the demo link, signs in, lists passkeys and sessions, steps up and signs out', async () => {
    const { page, credentials } = await browser.pageWithAuthenticator();
    const served = await page.goto(`${site}${enrolmentPath}`);
    assert.equal(served?.status(), 200);
    assert.match(served?.headers()['content-security-policy'] ?? '', /script-src 'self'/);
    await page.locator('#enrol').waitFor({ state: 'visible' });
    await page.click('#enrol-button');
    await page.locator('#status', { hasText: 'Passkey registered for ada.admin@demo.example' }).waitFor();
    assert.equal(new URL(page.url()).hash, '', 'the one-time token leaves the address bar');
    const held = await credentials();
    assert.equal(held.length, 1);
    assert.equal(held[0]?.isResidentCredential, true);

    await page.click('#signin-button');
    await page.locator('#account').waitFor({ state: 'visible' });
    assert.equal(await page.textContent('#user-name'), 'ada.admin@demo.example');
    assert.equal(await page.locator('#passkeys li').count(), 1);
    assert.match(await page.locator('#passkeys li').first().innerText(), /This device/);
    await page.locator('#sessions li', { hasText: 'This session' }).waitFor();

    await page.click('#stepup-button');
    await page
      .locator('#stepup-result', { hasText: 'Confirmed: an AAL 2 token for POST /v1/admin/rotate-keys' })
      .waitFor();
    const { rows: used } = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'demo' AND action = 'staff.stepup' AND decision->>'allow' = 'true'`,
    );
    assert.equal(used.length, 1);
    assert.ok(
      ((await credentials())[0]?.signCount ?? 0) >= 2,
      'the authenticator signed the sign-in and the step-up',
    );

    await page.click('#signout-button');
    await page.locator('#status', { hasText: 'Signed out.' }).waitFor();
    assert.equal(await page.locator('#signin').isVisible(), true);
    const { rows } = await tdb.db.query(
      `SELECT revoked_at FROM sessions WHERE tenant_id = 'demo' AND subject_type = 'user'`,
    );
    assert.equal(rows.length, 1);
    assert.ok(rows[0]?.revoked_at, 'signing out revoked the session');

    // The link was used once: opening it again cannot register another passkey.
    const second = await browser.pageWithAuthenticator();
    await second.page.goto(`${site}${enrolmentPath}`);
    await second.page.click('#enrol-button');
    await second.page.locator('#status', { hasText: 'Registration failed' }).waitFor();
    assert.equal((await second.credentials()).length, 0);
  });
});

if (skip) process.stderr.write(`staff-passkey-browser: skipped: ${skip}\n`);
