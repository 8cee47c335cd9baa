/**
 * Attacks on a staff token's roles after they were taken away (issue 14 items 1 and 5): a staff
 * access token's `org_roles` and `tenant_roles` count only while the member still holds them
 * (edge/auth/staff.ts). Each way a role can be removed is tried from outside, through the dev
 * gateway, with a token minted before the removal; so are a second edge process, the edge's
 * LISTEN connection dropped, an owned tenant that stops being owned, a step-up token, the roles
 * core itself reads from `x-roles`, and a member left with no role at all.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { deriveApiKeySealKey, deriveChallengeKey, type KeyStore } from '../../core/keys/keys.ts';
import { roleGroupId } from '../../core/staff/scim/groups.ts';
import { buildEdge, type Edge } from '../../edge/main.ts';
import { createLogger } from '../../shared/log.ts';
import { loadOrCreateMasterKey } from '../../shared/sealing.ts';
import { serverUrl, type TestDb } from '../helpers/db.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { checkClient, envoyRequest } from '../helpers/edge.ts';
import { asBearer } from '../helpers/gateway.ts';
import { eventually, type Res } from '../helpers/http.ts';
import { addStaff, addTenant, adminStepUpToken, signIn, stackKeys } from '../staff/fixtures.ts';
import { federatedSignIn, providerSettings, startTestIdp, type TestIdp } from '../staff/idp.ts';

const patchOp = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const groupSchema = 'urn:ietf:params:scim:schemas:core:2.0:Group';

describe('attacks on staff roles taken away', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let dataDir: string;
  let gw: string;
  let keys: KeyStore;
  let scimToken: string;
  let serviceAdmin: string;
  let idp: TestIdp | undefined;

  const as = asBearer(() => gw);
  const scim = (method: string, path: string, json?: unknown) =>
    as(scimToken, method, `/scim/v2${path}`, {
      ...(json !== undefined ? { json } : {}),
      headers: json !== undefined ? { 'content-type': 'application/scim+json' } : {},
    });
  /** An Admin-only write (flag.put_flag), a new Idempotency-Key each time. */
  const putFlag = (token: string) =>
    as(token, 'PUT', '/v1/flags/attack_roles_flag', {
      json: { enabled: true },
      headers: { 'idempotency-key': randomUUID() },
    });
  const ok = (r: Res) => r.status === 200 || r.status === 201;
  /** `token`'s GET of `path`, polled until the edge has heard of a change and answers 403. */
  const refusedGet = (token: string, path: string) =>
    eventually(
      () => as(token, 'GET', path),
      (x) => x.status === 403,
    );

  /** An Admin's answer to a write, polled after `remove` took the role away (their token works before). */
  async function demotedBy(userName: string, remove: (id: string) => Promise<void>): Promise<Res> {
    const id = await addStaff(tdb.db, 'demo', userName, ['admin', 'readonly']);
    const token = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    const first = await putFlag(token);
    assert.ok(ok(first), first.text);
    await remove(id);
    return eventually(
      () => putFlag(token),
      (r) => r.status === 403 || r.status === 401,
    );
  }

  const rolesOf = async (id: string): Promise<string[]> =>
    (
      await tdb.db.query<{ role: string }>(
        'SELECT role FROM staff_user_roles WHERE tenant_id = $1 AND user_id = $2 ORDER BY role',
        ['demo', id],
      )
    ).rows.map((r) => r.role);

  before(async () => {
    // The test identity provider listens on loopback: the SSRF guard allows it in this test only.
    e2e = await startE2eStack('attack-roles', { webhookAllowPrivateTargets: true });
    ({ tdb, dataDir, gw } = e2e);
    keys = await stackKeys(tdb.db, dataDir);
    const demo = e2e.demo as { scim: { token: string }; serviceTokens: { admin: { token: string } } };
    scimToken = demo.scim.token;
    serviceAdmin = demo.serviceTokens.admin.token;
  });
  after(async () => {
    await idp?.close();
    await e2e?.stop();
  });

  it('every SCIM write that takes a member out of a role group ends the role at the next request', async () => {
    const admins = `/Groups/${roleGroupId('demo', 'admin')}`;
    const byValue = await demotedBy('scim-value@demo.example', async (id) => {
      const r = await scim('PATCH', admins, {
        schemas: [patchOp],
        // An identity provider may send the id in upper case.
        Operations: [{ op: 'remove', path: 'members', value: [{ value: id.toUpperCase() }] }],
      });
      assert.equal(r.status, 200, r.text);
    });
    assert.equal(byValue.status, 403, byValue.text);
    const byFilter = await demotedBy('scim-filter@demo.example', async (id) => {
      const r = await scim('PATCH', admins, {
        schemas: [patchOp],
        Operations: [{ op: 'remove', path: `members[value eq "${id}"]` }],
      });
      assert.equal(r.status, 200, r.text);
    });
    assert.equal(byFilter.status, 403, byFilter.text);
    const byPut = await demotedBy('scim-put@demo.example', async (id) => {
      const current = await scim('GET', admins);
      const others = (current.json.members as { value: string }[]).filter((m) => m.value !== id);
      const r = await scim('PUT', admins, { schemas: [groupSchema], displayName: 'Admin', members: others });
      assert.equal(r.status, 200, r.text);
    });
    assert.equal(byPut.status, 403, byPut.text);
    const deleted = await demotedBy('scim-delete@demo.example', async (id) => {
      assert.equal((await scim('DELETE', `/Users/${id}`)).status, 204);
    });
    assert.equal(deleted.status, 401, 'a deleted member has no session left at all');
  });

  it("a federated sign-in whose groups changed ends the roles of the member's other sessions; group names that are Object properties map to nothing", async () => {
    const provider = await startTestIdp(`${gw}/auth/callback`);
    idp = provider;
    const put = await as(serviceAdmin, 'PUT', '/v1/identity-provider', {
      json: providerSettings(provider, gw),
      headers: { 'idempotency-key': randomUUID() },
    });
    assert.equal(put.status, 200, put.text);
    const signInWith = (groups: string[]) =>
      federatedSignIn(gw, provider, {
        sub: 'idp-sub-fed-roles',
        preferred_username: 'fed-roles@demo.example',
        groups,
      });
    const id = await addStaff(tdb.db, 'demo', 'fed-roles@demo.example', ['admin'], 'idp-sub-fed-roles');
    const earlier = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    assert.ok(ok(await putFlag(earlier)));
    const later = await signInWith(['Ops']);
    assert.equal(later.status, 200, later.text);
    const r = await eventually(
      () => putFlag(earlier),
      (x) => x.status === 403,
    );
    assert.equal(r.status, 403, 'the session started before the provider dropped the group is no Admin');
    assert.deepEqual(await rolesOf(id), ['ops']);
    // Group names come from the provider's administrators: one named like a property every
    // object inherits is no role name, and no such text is written as a role.
    const odd = await signInWith(['constructor', '__proto__', 'toString', 'hasOwnProperty', 'Ops']);
    assert.equal(odd.status, 200, odd.text);
    assert.deepEqual(await rolesOf(id), ['ops']);
    // Text PostgreSQL cannot hold (NUL, a lone surrogate) is no group: one such group refused the
    // whole sign-in (400 VALIDATION_FAILED from the failed query) before.
    const unstorable = await signInWith(['Ops', 'adm\u0000in', 'x\uD800']);
    assert.equal(unstorable.status, 200, unstorable.text);
    assert.deepEqual(await rolesOf(id), ['ops']);
    const named = await federatedSignIn(gw, provider, {
      sub: 'idp-sub-\u0000nul',
      preferred_username: 'fed-roles@demo.example\u0000',
      groups: ['Ops'],
    });
    assert.ok(
      named.status < 500,
      `a NUL in sub or username names nobody, never a 5xx: ${named.status} ${named.text}`,
    );
  });

  it('a second edge process drops its cached member too', async () => {
    const masterKey = await loadOrCreateMasterKey(undefined, join(dataDir, 'master.key'));
    const second: Edge = await buildEdge({
      db: tdb.db,
      apiKeySealKey: deriveApiKeySealKey(masterKey),
      challengeKeys: [deriveChallengeKey(masterKey)],
      log: createLogger('silent'),
      edgeSecret: 'second-edge',
      budgetMs: 3000,
    });
    const client = checkClient(`127.0.0.1:${await second.listen(0, '127.0.0.1')}`);
    try {
      const id = await addStaff(tdb.db, 'demo', 'two-edges@demo.example', ['admin']);
      const token = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
      const check = () =>
        client.check(
          envoyRequest('PUT', '/v1/flags/attack_roles_flag', {
            headers: {
              authorization: `Bearer ${token}`,
              'content-type': 'application/json',
              'idempotency-key': randomUUID(),
            },
            body: '{"enabled":true}',
            ip: '127.0.0.1',
          }),
          5000,
        );
      assert.equal((await check()).status.code, 0, 'allowed while the member is an Admin');
      assert.ok(ok(await putFlag(token)));
      await tdb.db.query(`DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1`, [id]);
      const until = Date.now() + 5000;
      let code = (await check()).status.code;
      while (code === 0 && Date.now() < until) {
        await new Promise((res) => setTimeout(res, 50));
        code = (await check()).status.code;
      }
      assert.notEqual(code, 0, 'the second edge refuses it too');
      const first = await eventually(
        () => putFlag(token),
        (x) => x.status === 403,
      );
      assert.equal(first.status, 403, first.text);
    } finally {
      client.close();
      await second.stop();
    }
  });

  it("a role removed while the edge's LISTEN connection was down does not survive its reconnect", async () => {
    const id = await addStaff(tdb.db, 'demo', 'listener@demo.example', ['admin']);
    const token = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    assert.ok(ok(await putFlag(token)), 'the member is cached as an Admin');
    // The edge's listener is the connection whose heartbeat (a NOTIFY on its own channel,
    // shared/db/listener.ts) repeats every second; core's listeners beat every 5 s.
    const heartbeats = async () =>
      new Map(
        (
          await tdb.db.query<{ pid: number; at: Date }>(
            `SELECT pid, state_change AS at FROM pg_stat_activity WHERE datname = current_database() AND query = 'SELECT pg_notify($1, $2)'`,
          )
        ).rows.map((r) => [r.pid, r.at.getTime()]),
      );
    const before = await heartbeats();
    await new Promise((res) => setTimeout(res, 1500));
    const listeners = [...(await heartbeats())].filter(([pid, at]) => (before.get(pid) ?? at) !== at);
    assert.ok(listeners.length > 0, "the edge's listener was found");
    // End it while nobody may connect, and change the roles before it can listen again: that
    // NOTIFY reaches no edge. Then let it reconnect.
    const server = new pg.Client({ connectionString: serverUrl() });
    await server.connect();
    try {
      await server.query(`ALTER DATABASE ${tdb.name} ALLOW_CONNECTIONS false`);
      await tdb.db.query('SELECT pg_terminate_backend(pid, 5000) FROM unnest($1::int[]) AS pid', [
        listeners.map(([pid]) => pid),
      ]);
      await tdb.db.query(`DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1`, [id]);
    } finally {
      await server.query(`ALTER DATABASE ${tdb.name} ALLOW_CONNECTIONS true`);
      await server.end();
    }
    const r = await eventually(
      () => putFlag(token),
      (x) => x.status === 403,
    );
    assert.equal(r.status, 403, r.text);
  });

  it('a tenant that stops being owned, or a role removed at home, ends the role in the owned tenant', async () => {
    await addTenant(tdb.db, 'rolechild', 'demo');
    await addTenant(tdb.db, 'rolechild2', 'demo');
    const id = await addStaff(tdb.db, 'demo', 'owner-roles@demo.example', ['admin']);
    const token = (await signIn(tdb.db, keys, 'demo', id)).accessToken;
    assert.equal((await as(token, 'GET', '/v1/tenants/rolechild')).status, 200);
    assert.equal((await as(token, 'GET', '/v1/tenants/rolechild2')).status, 200);
    await tdb.db.query(
      `DELETE FROM relationship_tuples WHERE tenant_id = 'demo' AND subject_ns = 'tenant' AND subject_id = 'demo'
          AND relation = 'owner' AND object_ns = 'tenant' AND object_id = 'rolechild'`,
    );
    const disowned = await refusedGet(token, '/v1/tenants/rolechild');
    assert.equal(disowned.status, 403, disowned.text);
    await tdb.db.query(`DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1`, [id]);
    const stillOwned = await refusedGet(token, '/v1/tenants/rolechild2');
    assert.equal(stillOwned.status, 403, stillOwned.text);
  });

  it('a step-up token minted before the removal carries no removed role', async () => {
    const id = await addStaff(tdb.db, 'demo', 'stepped@demo.example', ['admin']);
    const s = await signIn(tdb.db, keys, 'demo', id);
    const path = '/v1/admin/rotate-keys';
    const body = { graceSeconds: 3600 };
    const challenged = await as(s.accessToken, 'POST', path, { json: body });
    assert.equal(challenged.json.code, 'MFA_REQUIRED', challenged.text);
    const stepped = await adminStepUpToken(
      keys,
      { tenantId: 'demo', userId: id, sessionId: s.sessionId },
      'POST',
      path,
      body,
    );
    await tdb.db.query(`DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1`, [id]);
    // The plain token shows when the edge has heard; the step-up token is then tried once.
    const plain = await refusedGet(s.accessToken, '/v1/countries');
    assert.equal(plain.status, 403, plain.text);
    const r = await as(stepped, 'POST', path, { json: body });
    assert.equal(r.status, 403, r.text);
    const { rows } = await tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'demo' AND action = 'keys.rotate' AND actor->>'id' = $1`,
      [`staff:${id}`],
    );
    assert.equal(rows.length, 0, 'no key was rotated by the demoted member');
  });

  it("core reads the roles the member still holds from x-roles; a member with none keeps only the person's own routes", async () => {
    const id = await addStaff(tdb.db, 'demo', 'support-admin@demo.example', ['admin', 'support']);
    const s = await signIn(tdb.db, keys, 'demo', id);
    const sessions = () => as(s.accessToken, 'GET', `/sessions?userId=${id}`);
    const full = await sessions();
    assert.equal(full.status, 200, full.text);
    assert.equal(full.json.items[0].ip, '127.0.0.1', 'an Admin sees the address');
    await tdb.db.query(
      `DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1 AND role = 'admin'`,
      [id],
    );
    const masked = await eventually(sessions, (x) => x.status === 200 && x.json.items[0].ip !== '127.0.0.1');
    assert.equal(masked.status, 200, masked.text);
    assert.equal(masked.json.items[0].ip, '127.0.x.x', 'support without admin sees it masked');
    await tdb.db.query(`DELETE FROM staff_user_roles WHERE tenant_id = 'demo' AND user_id = $1`, [id]);
    const none = await eventually(sessions, (x) => x.status === 403);
    assert.equal(none.status, 403, none.text);
    assert.equal((await as(s.accessToken, 'GET', '/v1/countries')).status, 403);
    // Routes acting for the signed-in person need no role: the member can still see and end it.
    assert.equal((await as(s.accessToken, 'GET', '/auth/passkeys')).status, 200);
    const out = await as(s.accessToken, 'POST', '/auth/logout', { json: {} });
    assert.ok(out.status === 200 || out.status === 204, out.text);
  });
});
