/**
 * Issue 14 items 5–6, issue 16 item 2, through the dev gateway with nothing mocked: staff access
 * tokens on administration routes (roles from the token, per tenant), a deprovisioned member's
 * still-valid token refused, another tenant's token refused, AAL 2 for sensitive actions with a
 * request-bound, single-use step-up token, and audit records naming the person.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import type { KeyStore } from '../../core/keys/keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { asBearer, signUpCustomer } from '../helpers/gateway.ts';
import { eventually, type Res } from '../helpers/http.ts';
import { addStaff, addTenant, adminStepUpToken, signIn, stackKeys } from '../staff/fixtures.ts';

describe('staff tokens at the edge', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let keys: KeyStore;
  let adminId: string;
  let admin: string;
  let serviceAdmin: string;

  const as = asBearer(() => gw);

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-staff-'));
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
    await addTenant(tdb.db, 'staffchild', 'demo');
    await addTenant(tdb.db, 'staffother');
    adminId = await addStaff(tdb.db, 'demo', 'ada@demo.example', ['admin']);
    admin = (await signIn(tdb.db, keys, 'demo', adminId)).accessToken;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      serviceTokens: { admin: { token: string } };
    };
    serviceAdmin = demo.serviceTokens.admin.token;
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('a staff member reads and writes with the roles the token carries; core audits the person, AAL and session', async () => {
    const read = await as(admin, 'GET', '/v1/countries');
    assert.equal(read.status, 200, read.text);
    const put = await as(admin, 'PUT', '/v1/flags/staff_e2e_flag', {
      json: { enabled: true },
      headers: { 'idempotency-key': 'staff-flag-0001' },
    });
    assert.ok(put.status === 200 || put.status === 201, put.text);
    const { rows } = await tdb.db.query<{
      actor: { type: string; id: string };
      attrs: { aal: number; sessionId: string };
    }>(
      `SELECT actor, attrs FROM audit_log WHERE tenant_id = 'demo' AND action LIKE 'flag.%' ORDER BY id DESC LIMIT 1`,
    );
    assert.deepEqual(rows[0]?.actor, { type: 'staff', id: `staff:${adminId}` });
    assert.equal(rows[0]?.attrs.aal, 1);
    const sid = (
      await tdb.db.query<{ id: string }>(
        `SELECT id FROM sessions WHERE subject_type = 'user' AND subject_id = $1`,
        [adminId],
      )
    ).rows[0]?.id;
    assert.equal(rows[0]?.attrs.sessionId, sid);
  });

  it('refuses a staff token past the idle timeout, a customer token and a forged token on an admin route', async () => {
    const id = await addStaff(tdb.db, 'demo', 'idler@demo.example', ['admin']);
    const s = await signIn(tdb.db, keys, 'demo', id);
    await tdb.db.query(`UPDATE sessions SET last_seen = now() - interval '2 hours' WHERE id = $1`, [
      s.sessionId,
    ]);
    const idle = await eventually(
      () => as(s.accessToken, 'GET', '/v1/countries'),
      (x) => x.status === 401,
    );
    assert.equal(idle.status, 401, idle.text);
    assert.equal(idle.json.reason, 'session_expired');
    const customer = await signUpCustomer(gw, dataDir, '+254711500902', '4826', 'dev-staff-edge');
    assert.equal(
      (await as(customer.accessToken, 'GET', '/v1/countries')).status,
      401,
      'a customer token is no staff token',
    );
    const [h, p] = admin.split('.');
    assert.equal((await as(`${h}.${p}.${'A'.repeat(86)}`, 'GET', '/v1/countries')).status, 401);
  });

  it('a ReadOnly member is refused a mutation at the edge, audited with the roles check that failed', async () => {
    const id = await addStaff(tdb.db, 'demo', 'ro@demo.example', ['readonly']);
    const ro = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    assert.equal((await as(ro, 'GET', '/v1/countries')).status, 200);
    const r = await as(ro, 'PUT', '/v1/flags/staff_ro_flag', {
      json: { enabled: true },
      headers: { 'idempotency-key': 'staff-flag-0002' },
    });
    assert.equal(r.status, 403, r.text);
    assert.match(r.headers['content-type'] ?? '', /problem\+json/);
    // The edge audits the person's refusal with the check that failed (its trace comes after the answer).
    const denial = await eventually(
      async () => {
        const d = await tdb.db.query<{ failed: unknown }>(
          `SELECT attrs->'failed_checks' AS failed FROM audit_log WHERE action = 'authz.decision' AND actor->>'id' = $1 AND decision->>'allow' = 'false' AND attrs ? 'failed_checks'`,
          [`staff:${id}`],
        );
        return { status: d.rows.length, headers: {}, text: '', json: d.rows[0] } as unknown as Res;
      },
      (x) => x.status === 1,
    );
    assert.equal(denial.status, 1, 'the refusal is audited with its failed checks');
    assert.deepEqual(denial.json.failed, [{ ok: false, check: 'roles', detail: ['admin'] }]);
  });

  it("a deprovisioned member's still-valid access token is refused at once", async () => {
    const id = await addStaff(tdb.db, 'demo', 'leaver@demo.example', ['admin']);
    const token = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    assert.equal((await as(token, 'GET', '/v1/countries')).status, 200);
    await tdb.db.query('UPDATE staff_users SET active = false WHERE id = $1', [id]);
    const r = await eventually(
      () => as(token, 'GET', '/v1/countries'),
      (x) => x.status === 401,
    );
    assert.equal(r.status, 401, r.text);
  });

  it("a role taken away stops counting at the member's next request, at home and in an owned tenant", async () => {
    const id = await addStaff(tdb.db, 'demo', 'demoted@demo.example', ['admin']);
    const token = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    const put = (n: number) =>
      as(token, 'PUT', '/v1/flags/staff_demoted_flag', {
        json: { enabled: n % 2 === 0 },
        headers: { 'idempotency-key': `staff-demoted-${n}-${randomUUID()}` },
      });
    const before = await put(0);
    assert.ok(before.status === 200 || before.status === 201, before.text);
    assert.equal((await as(token, 'GET', '/v1/tenants/staffchild')).status, 200);
    // SCIM's group change writes these rows; the token still says admin for up to ten minutes.
    await tdb.db.query(`DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1`, [id]);
    await tdb.db.query(
      `INSERT INTO staff_user_roles (tenant_id, user_id, role) VALUES ('demo', $1, 'readonly')`,
      [id],
    );
    let n = 1;
    const after = await eventually(
      () => put(n++),
      (x) => x.status === 403,
    );
    assert.equal(after.status, 403, after.text);
    assert.equal((await as(token, 'GET', '/v1/tenants/staffchild')).status, 403);
    // A role the token never carried is not granted by the member's current roles either.
    assert.equal((await as(token, 'GET', '/v1/countries')).status, 403);
  });

  it("another tenant's staff token is refused on this tenant's admin route; an owner's tenant_roles grant it", async () => {
    const otherId = await addStaff(tdb.db, 'staffother', 'eve@other.example', ['admin']);
    const other = (await signIn(tdb.db, keys, 'staffother', otherId)).accessToken;
    const refused = await as(other, 'GET', '/v1/tenants/demo');
    assert.equal(refused.status, 403, refused.text);
    const refusedChild = await as(other, 'GET', '/v1/tenants/staffchild');
    assert.equal(refusedChild.status, 403, refusedChild.text);
    // demo owns staffchild: its admin's token carries tenant_roles for it.
    const owner = (await signIn(tdb.db, keys, 'demo', adminId)).accessToken;
    const child = await as(owner, 'GET', '/v1/tenants/staffchild');
    assert.equal(child.status, 200, child.text);
  });

  it('key rotation at AAL 1 answers MFA_REQUIRED with a challenge; a step-up token for that request works once; a service token needs none', async () => {
    const path = '/v1/admin/rotate-keys';
    const body = { graceSeconds: 3600 };
    const r = await as(admin, 'POST', path, { json: body });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.code, 'MFA_REQUIRED');
    assert.equal(typeof r.json.challenge, 'string');
    const session = (
      await tdb.db.query<{ id: string }>(
        `SELECT id FROM sessions WHERE subject_type = 'user' AND subject_id = $1 AND revoked_at IS NULL ORDER BY created_at LIMIT 1`,
        [adminId],
      )
    ).rows[0]?.id as string;
    const stepped = await adminStepUpToken(
      keys,
      { tenantId: 'demo', userId: adminId, sessionId: session },
      'POST',
      path,
      body,
    );
    const elsewhere = await as(stepped, 'GET', '/v1/countries');
    assert.equal(elsewhere.status, 401, 'a request-bound token is good for its request only');
    const ok = await as(stepped, 'POST', path, { json: body });
    assert.equal(ok.status, 200, ok.text);
    const again = await as(stepped, 'POST', path, { json: body });
    assert.equal(again.status, 401, 'and only once');
    const { rows } = await tdb.db.query<{ actor: { id: string }; attrs: { aal: number } }>(
      `SELECT actor, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'keys.rotate' ORDER BY id DESC LIMIT 1`,
    );
    assert.equal(rows[0]?.actor.id, `staff:${adminId}`);
    assert.equal(rows[0]?.attrs.aal, 2);
    const decisions = await eventually(
      async () => {
        const d = await tdb.db.query<{
          actor: { type: string; id: string };
          decision: { aal: number };
          attrs: { session_id: string };
        }>(
          // This session's decisions: the audit thread writes them a moment after the answers, and
          // earlier sessions of the same person have decisions of their own.
          `SELECT actor, decision, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'authz.decision' AND actor->>'id' = $1 AND attrs->>'session_id' = $2 ORDER BY id DESC LIMIT 1`,
          [`staff:${adminId}`, session],
        );
        return { status: d.rows.length, headers: {}, text: '', json: d.rows[0] } as unknown as Res;
      },
      (x) => x.status === 1,
    );
    assert.equal(decisions.status, 1, "the edge audits this session's decisions, naming the session");
    assert.equal(decisions.json.actor.type, 'staff', 'the edge audits the person');
    const machine = await as(serviceAdmin, 'POST', path, { json: body });
    assert.equal(machine.status, 200, machine.text);
  });
});
