/**
 * Issue 14 items 3–4 through the dev gateway: staff refresh at POST /auth/token (rotation, reuse
 * revokes the family and the session, idle timeout, deprovisioned member, wrong tokens throttled
 * per address, a customer's refresh token refused) and session administration (GET /sessions
 * masked for support, DELETE /sessions/{id} for Admin at AAL 2, the edge refusing the revoked
 * session at once, both audited with the acting person).
 */
import assert from 'node:assert/strict';
import { origOf } from '../../shared/challenge.ts';
import { stepUpStaffSession } from '../../core/staff/tokens.ts';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import type { KeyStore } from '../../core/keys/keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying, signUpCustomer } from '../helpers/gateway.ts';
import { eventually } from '../helpers/http.ts';
import type { Res } from '../helpers/http.ts';
import { addStaff, signIn, stackKeys } from '../staff/fixtures.ts';

describe('staff refresh and session administration', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let keys: KeyStore;

  const as = (
    token: string,
    method: string,
    path: string,
    headers: Record<string, string> = {},
  ): Promise<Res> =>
    callRetrying(gw, method, path, {
      headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...headers },
    });
  const refresh = (refreshToken: string, tenantId = 'demo'): Promise<Res> =>
    callRetrying(gw, 'POST', '/auth/token', { json: { tenantId, refreshToken } });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-staff-sessions-'));
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
    keys = await stackKeys(tdb.db, dataDir);
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('rotates a staff refresh token; the new access token works and keeps the sign-in AAL', async () => {
    const id = await addStaff(tdb.db, 'demo', 'rot@demo.example', ['ops']);
    const first = await signIn(tdb.db, keys, 'demo', id, 2);
    const r = await refresh(first.refreshToken);
    assert.equal(r.status, 200, r.text);
    assert.notEqual(r.json.refreshToken, first.refreshToken);
    assert.equal(r.json.sessionId, first.sessionId);
    assert.equal(r.json.aal, 2);
    assert.equal((await as(r.json.accessToken, 'GET', '/v1/countries')).status, 200);
  });

  it('a refresh token reused after rotation revokes its family and session: the live access token is refused at the edge', async () => {
    const id = await addStaff(tdb.db, 'demo', 'reuse@demo.example', ['ops']);
    const first = await signIn(tdb.db, keys, 'demo', id);
    const rotated = await refresh(first.refreshToken);
    assert.equal(rotated.status, 200, rotated.text);
    const replay = await refresh(first.refreshToken);
    assert.equal(replay.status, 401, replay.text);
    assert.equal(replay.json.code, 'INVALID_REFRESH_TOKEN');
    assert.equal(
      (await refresh(rotated.json.refreshToken)).status,
      401,
      'the family is revoked: the newest token too',
    );
    const r = await eventually(
      () => as(rotated.json.accessToken, 'GET', '/v1/countries'),
      (x) => x.status === 401,
    );
    assert.equal(r.status, 401, r.text);
  });

  it("refuses a refresh past the idle timeout, for a deprovisioned member, and a customer's refresh token", async () => {
    const idle = await addStaff(tdb.db, 'demo', 'idle@demo.example', ['ops']);
    const a = await signIn(tdb.db, keys, 'demo', idle);
    await tdb.db.query(`UPDATE sessions SET last_seen = now() - interval '2 hours' WHERE id = $1`, [
      a.sessionId,
    ]);
    assert.equal((await refresh(a.refreshToken)).status, 401);
    const gone = await addStaff(tdb.db, 'demo', 'gone@demo.example', ['ops']);
    const b = await signIn(tdb.db, keys, 'demo', gone);
    await tdb.db.query('UPDATE staff_users SET active = false WHERE id = $1', [gone]);
    assert.equal((await refresh(b.refreshToken)).status, 401);
    const revoked = await tdb.db.query<{ revoke_reason: string }>(
      'SELECT revoke_reason FROM sessions WHERE id = $1',
      [b.sessionId],
    );
    assert.equal(revoked.rows[0]?.revoke_reason, 'subject_inactive');
    const customer = await signUpCustomer(gw, dataDir, '+254711500901', '4826', 'dev-staff-sessions');
    assert.equal(
      (await refresh(customer.refreshToken)).status,
      401,
      'a customer refresh token is not a staff one',
    );
    const stillCustomer = await callRetrying(gw, 'POST', '/customers/auth/token/refresh', {
      json: { tenantId: 'demo', refreshToken: customer.refreshToken },
    });
    assert.equal(stillCustomer.status, 200, 'and was not consumed by the refusal');
  });

  it("GET /sessions lists a member's sessions: unmasked for Admin, masked for support, audited; refused for Ops", async () => {
    const adminId = await addStaff(tdb.db, 'demo', 'sess-admin@demo.example', ['admin']);
    const supportId = await addStaff(tdb.db, 'demo', 'sess-support@demo.example', ['support']);
    const opsId = await addStaff(tdb.db, 'demo', 'sess-ops@demo.example', ['ops']);
    const subject = await addStaff(tdb.db, 'demo', 'sess-subject@demo.example', ['readonly']);
    const s = await signIn(tdb.db, keys, 'demo', subject);
    await tdb.db.query(
      `UPDATE sessions SET ip = '198.51.100.23', device = 'device-abcdef1234' WHERE id = $1`,
      [s.sessionId],
    );
    const admin = (await signIn(tdb.db, keys, 'demo', adminId)).accessToken;
    const full = await as(admin, 'GET', `/sessions?userId=${subject}`);
    assert.equal(full.status, 200, full.text);
    assert.deepEqual(
      full.json.items.map((i: { id: string }) => i.id),
      [s.sessionId],
    );
    assert.equal(full.json.items[0].ip, '198.51.100.23');
    assert.equal(full.json.items[0].subjectType, 'staff');
    const support = (await signIn(tdb.db, keys, 'demo', supportId)).accessToken;
    const masked = await as(support, 'GET', `/sessions?userId=${subject}`);
    assert.equal(masked.status, 200, masked.text);
    assert.equal(masked.json.items[0].ip, '198.51.x.x');
    assert.equal(masked.json.items[0].device, '****1234');
    const ops = (await signIn(tdb.db, keys, 'demo', opsId)).accessToken;
    assert.equal((await as(ops, 'GET', `/sessions?userId=${subject}`)).status, 403);
    const bad = await as(admin, 'GET', '/sessions?userId=not-a-uuid');
    assert.equal(bad.status, 400, bad.text);
    const { rows } = await tdb.db.query<{ actor: { id: string }; attrs: { masked: boolean } }>(
      `SELECT actor, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'session.list' ORDER BY id`,
    );
    assert.deepEqual(
      rows.map((r) => [r.actor.id, r.attrs.masked]),
      [
        [`staff:${adminId}`, false],
        [`staff:${supportId}`, true],
      ],
    );
  });

  it('DELETE /sessions/{id}: AAL 1 asks for a step-up, AAL 2 revokes, the edge refuses the session next; support is refused', async () => {
    const adminId = await addStaff(tdb.db, 'demo', 'del-admin@demo.example', ['admin', 'support']);
    const subject = await addStaff(tdb.db, 'demo', 'del-subject@demo.example', ['readonly']);
    const victim = await signIn(tdb.db, keys, 'demo', subject);
    assert.equal((await as(victim.accessToken, 'GET', '/v1/countries')).status, 200);
    const low = (await signIn(tdb.db, keys, 'demo', adminId)).accessToken;
    const stepUp = await as(low, 'DELETE', `/sessions/${victim.sessionId}`);
    assert.equal(stepUp.status, 403, stepUp.text);
    assert.equal(stepUp.json.code, 'MFA_REQUIRED');
    // Signed in at AAL 2 is not consent to this action: a step-up bound to this request is (issue 16 item 2).
    const signedIn = await signIn(tdb.db, keys, 'demo', adminId, 2);
    assert.equal(
      (await as(signedIn.accessToken, 'DELETE', `/sessions/${victim.sessionId}`)).json.code,
      'MFA_REQUIRED',
    );
    const boundTo = (path: string) =>
      tdb.db.tx((q) =>
        stepUpStaffSession(
          q,
          keys,
          {
            tenantId: 'demo',
            userId: adminId,
            sessionId: signedIn.sessionId,
            amr: ['hwk'],
            orig: origOf('DELETE', path, ''),
          },
          Date.now(),
        ),
      );
    const high = (await boundTo(`/sessions/${victim.sessionId}`)).accessToken;
    const del = await as(high, 'DELETE', `/sessions/${victim.sessionId}`);
    assert.equal(del.status, 204, del.text);
    const refused = await eventually(
      () => as(victim.accessToken, 'GET', '/v1/countries'),
      (x) => x.status === 401,
    );
    assert.equal(refused.status, 401, refused.text);
    const unknown = `/sessions/${randomUUID()}`;
    assert.equal(
      (await as(high, 'DELETE', unknown)).status,
      401,
      'the step-up token was for the other request',
    );
    assert.equal((await as((await boundTo(unknown)).accessToken, 'DELETE', unknown)).status, 404);
    const { rows } = await tdb.db.query<{ actor: { id: string }; attrs: { aal: number } }>(
      `SELECT actor, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'session.revoke_by_admin' ORDER BY id DESC LIMIT 1`,
    );
    assert.equal(rows[0]?.actor.id, `staff:${adminId}`);
    assert.equal(rows[0]?.attrs.aal, 2);
    const supportOnly = await addStaff(tdb.db, 'demo', 'del-support@demo.example', ['support']);
    const sup = (await signIn(tdb.db, keys, 'demo', supportOnly, 2)).accessToken;
    assert.equal((await as(sup, 'DELETE', `/sessions/${randomUUID()}`)).status, 403);
  });
  // Last: the gateway's address (loopback) stays throttled for the demo tenant afterwards.
  it('wrong refresh tokens from one address are throttled (429 ADDRESS_THROTTLED with Retry-After)', async () => {
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"address_throttle": {"failures": 20, "window_minutes": 15, "delay_seconds": 60, "max_delay_minutes": 60}}' WHERE id = 'demo'`,
    );
    try {
      let last: Res | undefined;
      for (let i = 0; i < 21; i++) last = await refresh(`wrong-refresh-token-${i}-${randomUUID()}`);
      assert.equal(last?.status, 429, last?.text);
      assert.equal(last?.json.code, 'ADDRESS_THROTTLED');
      assert.ok(Number(last?.headers['retry-after']) > 0);
    } finally {
      await tdb.db.query(`UPDATE tenants SET security = security - 'address_throttle' WHERE id = 'demo'`);
    }
  });
});
