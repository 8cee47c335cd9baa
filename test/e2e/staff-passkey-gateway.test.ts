/**
 * Staff passkeys through the dev gateway without a browser (issue 16): the edge routes the
 * public staff sign-in routes, core verifies the staff token on the person's own routes, and the
 * Admin-only re-issue of an enrolment link is refused to other roles at the edge.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { SoftAuthenticator } from '../helpers/soft-authenticator.ts';
import { dpopCall, dpopKey } from '../helpers/dpop.ts';

interface Demo {
  staff: { admin: { userId: string; enrolmentLink: { token: string } } };
  serviceTokens: Record<'admin' | 'readOnly', { token: string }>;
}

describe('staff passkeys through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: Demo;

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-staff-gw-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Demo;
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('enrols, signs in, reads own passkeys, steps up; only an Admin re-issues a link', async () => {
    // The browser would be on http://localhost:<gateway port>: the development origin allowed.
    const auth = new SoftAuthenticator(`http://localhost:${stack.ports.gateway}`);
    const token = demo.staff.admin.enrolmentLink.token;
    const begun = await callRetrying(gw, 'POST', '/auth/enrolment/begin', {
      json: { tenantId: 'demo', token },
    });
    assert.equal(begun.status, 200, begun.text);
    const enrolled = await callRetrying(gw, 'POST', '/auth/enrolment/finish', {
      json: { tenantId: 'demo', token, response: auth.register(begun.json.options) },
    });
    assert.equal(enrolled.status, 201, enrolled.text);
    const lb = await callRetrying(gw, 'POST', '/auth/login', {
      json: { method: 'passkey', step: 'begin', tenantId: 'demo' },
    });
    const login = await callRetrying(gw, 'POST', '/auth/login', {
      json: { method: 'passkey', step: 'finish', tenantId: 'demo', response: auth.assert(lb.json.options) },
    });
    assert.equal(login.status, 200, login.text);
    const bearer = { authorization: `Bearer ${login.json.accessToken}` };
    const mine = await callRetrying(gw, 'GET', '/auth/passkeys', { headers: bearer });
    assert.equal(mine.status, 200, mine.text);
    assert.equal(mine.json.passkeys.length, 1);
    const none = await callRetrying(gw, 'GET', '/auth/passkeys');
    assert.equal(none.status, 401, 'no token: the one verifier refuses it (shared/access-token.ts)');
    assert.equal(none.json.code, 'UNAUTHENTICATED');
    assert.equal(
      (
        await callRetrying(gw, 'GET', '/auth/passkeys', {
          headers: { authorization: `Bearer ${demo.serviceTokens.admin.token}` },
        })
      ).status,
      401,
      'only a staff access token',
    );
    const ch = await callRetrying(gw, 'POST', '/auth/mfa/challenge', {
      json: { method: 'POST', path: `/v1/staff/users/${demo.staff.admin.userId}/enrolment-links` },
      headers: bearer,
    });
    assert.equal(ch.status, 200, ch.text);
    const up = await callRetrying(gw, 'POST', '/auth/mfa/complete', {
      json: { challengeToken: ch.json.challenge, response: auth.assert(ch.json.publicKey) },
      headers: bearer,
    });
    assert.equal(up.status, 200, up.text);
    assert.equal(up.json.aal, 2);

    const reissue = (who: 'admin' | 'readOnly') =>
      callRetrying(gw, 'POST', `/v1/staff/users/${demo.staff.admin.userId}/enrolment-links`, {
        headers: {
          authorization: `Bearer ${demo.serviceTokens[who].token}`,
          'x-request-id': randomUUID(),
          'idempotency-key': `reissue-${randomUUID()}`,
        },
      });
    const refused = await reissue('readOnly');
    assert.equal(refused.status, 403, refused.text);
    const issued = await reissue('admin');
    assert.equal(issued.status, 201, issued.text);
    assert.match(issued.json.path, /^\/staff#tenant=demo&enrol=enr_/);

    // Issue 17 item 3, one rule for staff too: a proof at sign-in binds the session's tokens.
    const key = await dpopKey();
    const viaDpop = dpopCall(key);
    const lb2 = await callRetrying(gw, 'POST', '/auth/login', {
      json: { method: 'passkey', step: 'begin', tenantId: 'demo' },
    });
    const bound = await viaDpop(gw, 'POST', '/auth/login', {
      json: { method: 'passkey', step: 'finish', tenantId: 'demo', response: auth.assert(lb2.json.options) },
    });
    assert.equal(bound.status, 200, bound.text);
    assert.equal(bound.json.tokenType, 'DPoP');
    const admin = { authorization: `Bearer ${bound.json.accessToken}`, 'x-request-id': randomUUID() };
    const asBearer = await callRetrying(gw, 'GET', '/v1/countries', { headers: admin });
    assert.equal(asBearer.status, 401, 'a bound staff token sent as a bearer token is refused at the edge');
    assert.match(asBearer.headers['www-authenticate'] ?? '', /^DPoP/);
    const proved = await viaDpop(gw, 'GET', '/v1/countries', { headers: admin });
    assert.equal(proved.status, 200, proved.text);
    const unproved = await callRetrying(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: bound.json.refreshToken },
    });
    assert.equal(unproved.status, 401, 'a bound session refreshes only with a proof by its key');
    const other = dpopCall(await dpopKey());
    assert.equal(
      (
        await other(gw, 'POST', '/auth/token', {
          json: { tenantId: 'demo', refreshToken: bound.json.refreshToken },
        })
      ).status,
      401,
      'nor with another key',
    );
    const refreshed = await viaDpop(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: bound.json.refreshToken },
    });
    assert.equal(refreshed.status, 200, refreshed.text);
    assert.equal(refreshed.json.tokenType, 'DPoP');
  });
});
