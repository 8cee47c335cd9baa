/**
 * A mutation and its audit record commit together or not at all (SPEC 2.8, 6.3): when the audit
 * record cannot be written, the change it records must not persist and the caller gets a clean
 * error, never a half-done success. The test's database refuses audit rows of one chosen action
 * (a trigger on audit_log); each case asks core's HTTP API for that mutation, then checks the
 * answer and the table the mutation writes, and finally that the same request succeeds once the
 * audit row is accepted again (so a refusal for another reason cannot pass for atomicity).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Db } from '../../shared/db/pool.ts';
import { startAdmin, type AdminHarness } from '../admin/harness.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { installAuditRefusal, type AuditRefusal } from '../helpers/audit-refusal.ts';
import { call, type Res } from '../helpers/http.ts';
import { addStaff, signIn } from '../staff/fixtures.ts';
import { startTestIdp, type TestIdp } from '../staff/idp.ts';

/** The harness's platform operator, and a tenant it onboarded. */
const operator = 'demo';
const tenant = 'other';

describe('a mutation whose audit record fails is not made', () => {
  let t: AdminHarness;
  let idp: TestIdp;
  let db: Db;
  let refusal: AuditRefusal;
  const refuse = (action: string) => refusal.refuse(action);
  const count = async (sql: string, params: unknown[]): Promise<number> =>
    Number((await db.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${sql}`, params)).rows[0]?.n);
  const staffHeaders = (tenantId: string) =>
    viaEdge({
      'x-request-id': randomUUID(),
      'idempotency-key': `atx-${randomUUID()}`,
      'x-tenant-id': tenantId,
      'x-principal-id': 'staff:atx-admin',
      'x-roles': 'admin',
      'x-client-ip': '10.0.0.1',
    });

  /** A call of the tenant's Admin, as the edge forwards it. */
  const asAdmin = (method: string, path: string, json?: unknown) =>
    call(t.origin, method, path, { ...(json === undefined ? {} : { json }), headers: staffHeaders(tenant) });

  /**
   * Refuse `action`'s audit row, send the request: a clean 500 (no stack, no detail) and nothing
   * persisted; accept the row again, send it anew: it succeeds and persists.
   */
  async function atomic(
    action: string,
    send: () => Promise<Res>,
    persisted: () => Promise<number>,
    okStatus: number,
  ): Promise<void> {
    await refuse(action);
    const refused = await send();
    assert.equal(refused.status, 500, refused.text);
    assert.doesNotMatch(refused.text, /audit refused|\bat .*\.ts:\d+/, 'no detail or stack in the answer');
    assert.equal(await persisted(), 0, `${action}: the change persisted without its audit record`);
    assert.equal(await count('audit_log WHERE action = $1', [action]), 0);
    await refusal.clear();
    const ok = await send();
    assert.equal(ok.status, okStatus, ok.text);
    assert.equal(await persisted(), 1, `${action}: the change is made once its record can be written`);
    assert.equal(await count('audit_log WHERE action = $1', [action]), 1);
  }

  /**
   * Refuse another record the same request writes (`other`): the request fails cleanly and
   * nothing persists, not even `action`'s record when it was written first (no record of a
   * change that rolled back).
   */
  async function undoneBy(
    other: string,
    action: string,
    send: () => Promise<Res>,
    persisted: () => Promise<number>,
  ) {
    await refuse(other);
    const r = await send();
    assert.equal(r.status, 500, r.text);
    assert.equal(await persisted(), 0, `${other} refused: the change persisted`);
    assert.equal(await count('audit_log WHERE action = $1', [action]), 0);
    await refusal.clear();
  }

  before(async () => {
    // Private targets allowed: the identity provider of the federation case listens on loopback.
    t = await startAdmin({ seed: false, allowPrivateWebhookTargets: true });
    db = t.tdb.db;
    await db.query('INSERT INTO admin_tenant_owners (tenant_id, owner_tenant_id) VALUES ($1, $2)', [
      tenant,
      operator,
    ]);
    idp = await startTestIdp(`${t.origin}/auth/callback`);
    refusal = await installAuditRefusal(db);
  });
  afterEach(() => refusal.clear());
  after(async () => {
    await idp?.close();
    await t?.close();
  });

  it('OAuth client registration', async () => {
    const name = `atx-client-${randomUUID()}`;
    await atomic(
      'oauth_client.create',
      () =>
        asAdmin('POST', '/v1/oauth-clients', {
          name,
          scopes: ['core:read'],
          token_endpoint_auth_method: 'client_secret_basic',
        }),
      () => count('oauth_clients WHERE tenant_id = $1 AND name = $2', [tenant, name]),
      201,
    );
  });

  it('API key creation', async () => {
    const name = `atx-key-${randomUUID()}`;
    await atomic(
      'apikey.create',
      () => asAdmin('POST', '/api-keys', { name, scopes: ['payments:read'] }),
      () => count('api_keys WHERE tenant_id = $1 AND name = $2', [tenant, name]),
      201,
    );
  });

  it('SCIM user provisioning (and its enrolment link)', async () => {
    const userName = `atx-${randomUUID()}@corp.test`;
    const scim = viaEdge({
      'x-request-id': randomUUID(),
      'x-tenant-id': tenant,
      'x-principal-id': 'scim-credential:atx',
      'x-roles': 'scim',
      'x-credential': 'scim-credential',
      'content-type': 'application/scim+json',
    });
    const send = () =>
      call(t.origin, 'POST', '/scim/v2/Users', {
        json: { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName },
        headers: scim,
      });
    const users = () => count('staff_users WHERE tenant_id = $1 AND user_name = $2', [tenant, userName]);
    // The enrolment link and its record are written after the user and its record.
    await undoneBy('staff.enrolment_link.create', 'staff.provision', send, users);
    await atomic('staff.provision', send, users, 201);
  });

  it('a relationship tuple write', async () => {
    const staff = await addStaff(db, tenant, `atx-tuple-${randomUUID()}`, ['support']);
    await atomic(
      'tuple.create',
      () =>
        asAdmin('PUT', `/v1/tenants/${tenant}/tuples`, {
          subject: { ns: 'staff', id: staff },
          relation: 'member',
          object: { ns: 'tenant', id: tenant },
        }),
      () =>
        count(
          `relationship_tuples WHERE tenant_id = $1 AND subject_ns = 'staff' AND subject_id = $2 AND relation = 'member'`,
          [tenant, staff],
        ),
      201,
    );
  });

  it("an administrator's revocation of a staff session", async () => {
    const staff = await addStaff(db, tenant, `atx-session-${randomUUID()}`, ['support']);
    const { sessionId } = await signIn(db, t.keys, tenant, staff);
    const revoked = () =>
      count('sessions WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NOT NULL', [tenant, sessionId]);
    const send = () => asAdmin('DELETE', `/sessions/${sessionId}`);
    // Both records of a revocation: core's session.revoke, then the administrator's.
    await undoneBy('session.revoke', 'session.revoke_by_admin', send, revoked);
    await atomic('session.revoke_by_admin', send, revoked, 204);
  });

  it("onboarding: a new tenant's first Admin", async () => {
    const userName = `atx-first-${randomUUID()}`;
    const send = () =>
      call(t.origin, 'POST', `/v1/tenants/${tenant}/first-admin`, {
        json: { userName },
        headers: staffHeaders(operator),
      });
    const users = () => count('staff_users WHERE tenant_id = $1 AND user_name = $2', [tenant, userName]);
    // The operator's record of the request comes after the new tenant's record of the Admin.
    await undoneBy('tenant.first_admin.issue', 'staff.first_admin.create', send, users);
    await atomic('staff.first_admin.create', send, users, 201);
  });

  it("a staff federated sign-in's begin (its state at the provider's return)", async () => {
    const put = await asAdmin('PUT', '/v1/identity-provider', {
      issuer: idp.issuer,
      clientId: idp.clientId,
      clientSecret: idp.clientSecret,
      redirectUri: `${t.origin}/auth/callback`,
    });
    assert.equal(put.status, 200, put.text);
    await atomic(
      'auth.staff_login',
      () => call(t.origin, 'POST', '/auth/login', { json: { tenantId: tenant, method: 'federation' } }),
      () => count('staff_federation_states WHERE tenant_id = $1', [tenant]),
      200,
    );
  });
});
