/**
 * Issue 14 items 1, 5 (credential guessing), 6 and 7 through the dev gateway, nothing mocked:
 * the demo SCIM credential from demo.json provisions staff at /scim/v2; an Admin service token
 * issues, lists and revokes SCIM credentials and manages service tokens (rotation grace,
 * expiry, revocation refused by the edge at once); another tenant's SCIM credential touches
 * none of the demo tenant's users; deprovisioning revokes the member's session and the edge is
 * told (sessions_changed); wrong SCIM credentials and service tokens from one address are
 * refused 429 past the threshold.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { issueScimCredential } from '../../core/staff/credentials.ts';
import { startStaffSession } from '../../core/staff/tokens.ts';
import { loadOrCreateMasterKey } from '../../shared/sealing.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, eventually, type Res } from '../helpers/http.ts';

const userSchema = 'urn:ietf:params:scim:schemas:core:2.0:User';
const patchSchema = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

describe('SCIM and machine credentials through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let scimToken: string;
  let adminToken: string;
  let staff: { id: string; userName: string; roles: string[] }[];

  const bearer =
    (token: string) =>
    (
      method: string,
      path: string,
      o: { json?: unknown; headers?: Record<string, string> } = {},
    ): Promise<Res> =>
      call(gw, method, path, {
        ...(o.json !== undefined ? { json: o.json } : {}),
        headers: {
          authorization: `Bearer ${token}`,
          'x-request-id': randomUUID(),
          ...(o.json !== undefined ? { 'content-type': 'application/scim+json' } : {}),
          ...o.headers,
        },
      });
  const admin = (method: string, path: string, json?: unknown) =>
    bearer(adminToken)(method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: {
        'content-type': 'application/json',
        ...(method === 'POST' ? { 'idempotency-key': randomUUID() } : {}),
      },
    });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-scim-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, {
      checkTimeoutMs: 3000,
      credentialGuessLimit: { perMinute: 1, burst: 8 },
    });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as {
      scim: { baseUrl: string; token: string };
      staff: { members: typeof staff };
      serviceTokens: { admin: { token: string } };
    };
    scimToken = demo.scim.token;
    adminToken = demo.serviceTokens.admin.token;
    staff = demo.staff.members;
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('the demo SCIM credential lists the seeded staff and provisions a new member', async () => {
    const scim = bearer(scimToken);
    const list = await scim('GET', '/scim/v2/Users');
    assert.equal(list.status, 200, list.text);
    assert.match(list.headers['content-type'] ?? '', /^application\/scim\+json/);
    assert.deepEqual(
      (list.json.Resources as { userName: string }[]).map((u) => u.userName).sort(),
      staff.map((s) => s.userName).sort(),
    );
    const made = await scim('POST', '/scim/v2/Users', {
      json: { schemas: [userSchema], userName: 'new.joiner@demo.example' },
    });
    assert.equal(made.status, 201, made.text);
    assert.equal(
      (await scim('GET', `/scim/v2/Users/${made.json.id}`)).json.userName,
      'new.joiner@demo.example',
    );
  });

  it('answers every bad input of issue 14 with a SCIM error', async () => {
    const scim = bearer(scimToken);
    const err = (r: Res, status: number, scimType?: string) => {
      assert.equal(r.status, status, r.text);
      assert.match(r.headers['content-type'] ?? '', /^application\/scim\+json/);
      if (scimType) assert.equal(r.json.scimType, scimType);
    };
    err(
      await scim('POST', '/scim/v2/Users', {
        json: { schemas: [userSchema], userName: staff[0]?.userName.toUpperCase() },
      }),
      409,
      'uniqueness',
    );
    err(
      await scim('GET', `/scim/v2/Users?filter=${encodeURIComponent('userName eq')}`),
      400,
      'invalidFilter',
    );
    err(
      await scim('PATCH', `/scim/v2/Users/${staff[0]?.id}`, {
        json: { schemas: [patchSchema], Operations: [{ op: 'replace', path: 'id', value: 'x' }] },
      }),
      400,
      'mutability',
    );
    err(
      await scim('POST', '/scim/v2/Users', {
        json: { schemas: ['urn:example:nope'], userName: 'x@demo.example' },
      }),
      400,
      'invalidSyntax',
    );
    const past = await scim('GET', '/scim/v2/Users?startIndex=100&count=5');
    assert.equal(past.status, 200);
    assert.deepEqual(past.json.Resources, []);
    assert.ok(past.json.totalResults >= 3);
    // No credential at all: the edge refuses it, in SCIM's own error format.
    err(await call(gw, 'GET', '/scim/v2/Users'), 401);
    // An unknown SCIM path is 404 and a method a SCIM path does not serve 405, in SCIM's format.
    err(await scim('GET', '/scim/v2/NoSuchResource'), 404);
    const wrongMethod = await scim('DELETE', '/scim/v2/ServiceProviderConfig');
    err(wrongMethod, 405);
    assert.equal(wrongMethod.headers.allow, 'GET');
  });

  it("a SCIM credential of another tenant never touches this tenant's users", async () => {
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('other', 'Other', 'KE', 'KES')`,
    );
    const { token } = await tdb.db.tx((q) =>
      issueScimCredential(q, 'other', 'other idp', 'test', Date.now()),
    );
    const other = bearer(token);
    const list = await other('GET', '/scim/v2/Users');
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.totalResults, 0);
    assert.equal((await other('GET', `/scim/v2/Users/${staff[0]?.id}`)).status, 404);
    assert.equal((await other('DELETE', `/scim/v2/Users/${staff[0]?.id}`)).status, 404);
    assert.equal(
      (
        await other('PATCH', `/scim/v2/Users/${staff[0]?.id}`, {
          json: { schemas: [patchSchema], Operations: [{ op: 'replace', value: { active: false } }] },
        })
      ).status,
      404,
    );
    // A body naming the demo tenant changes nothing: the tenant is the credential's.
    const named = await other('POST', '/scim/v2/Users', {
      json: { schemas: [userSchema], userName: 'sneak@demo.example', tenantId: 'demo' },
    });
    assert.notEqual(named.status, 201, 'a body naming another tenant is refused');
    assert.equal(
      (
        await bearer(scimToken)(
          'GET',
          `/scim/v2/Users?filter=${encodeURIComponent('userName eq "sneak@demo.example"')}`,
        )
      ).json.totalResults,
      0,
    );
  });

  it("deprovisioning revokes the member's session in the same transaction and tells the edges", async () => {
    const scim = bearer(scimToken);
    const made = await scim('POST', '/scim/v2/Users', {
      json: { schemas: [userSchema], userName: 'leaver@demo.example' },
    });
    const keys = new KeyStore(tdb.db, await loadOrCreateMasterKey(undefined, join(dataDir, 'master.key')));
    const session = await startStaffSession(
      tdb.db,
      keys,
      { tenantId: 'demo', userId: made.json.id, aal: 2, amr: ['hwk'], ip: '127.0.0.1', method: 'passkey' },
      Date.now(),
    );
    const listener = new pg.Client({ connectionString: tdb.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query('LISTEN sessions_changed');
    try {
      const r = await scim('PATCH', `/scim/v2/Users/${made.json.id}`, {
        json: { schemas: [patchSchema], Operations: [{ op: 'replace', path: 'active', value: false }] },
      });
      assert.equal(r.status, 200, r.text);
      const { rows } = await tdb.db.query<{ revoked_at: Date | null }>(
        'SELECT revoked_at FROM sessions WHERE id = $1',
        [session.sessionId],
      );
      assert.ok(rows[0]?.revoked_at, 'the session is revoked');
      await listener.query('SELECT 1');
      assert.ok(
        heard.some((p) => p.includes(session.sessionId)),
        'the edges were told',
      );
      const audit = await tdb.db.query<{ actor: { id: string } }>(
        `SELECT actor FROM audit_log WHERE action = 'staff.deprovision' AND target->>'id' = $1`,
        [made.json.id],
      );
      assert.match(audit.rows[0]?.actor.id ?? '', /^scim-credential:[0-9a-f-]{36}$/);
    } finally {
      await listener.end();
    }
  });

  it('an Admin issues (shown once), lists and revokes a SCIM credential; the edge refuses it at once', async () => {
    const issued = await admin('POST', '/v1/scim-credentials', { name: 'okta' });
    assert.equal(issued.status, 201, issued.text);
    assert.match(issued.json.token, /^scim_/);
    const list = await admin('GET', '/v1/scim-credentials');
    assert.equal(list.status, 200, list.text);
    assert.ok((list.json.items as { id: string }[]).some((c) => c.id === issued.json.id));
    assert.doesNotMatch(list.text, /scim_[A-Za-z0-9_-]{20}/);
    const scim = bearer(issued.json.token);
    assert.equal((await scim('GET', '/scim/v2/Users')).status, 200);
    assert.equal((await admin('DELETE', `/v1/scim-credentials/${issued.json.id}`)).status, 200);
    assert.equal(
      (
        await eventually(
          () => scim('GET', '/scim/v2/Users'),
          (r) => r.status === 401,
        )
      ).status,
      401,
    );
    // Only Admins manage SCIM credentials; a SCIM credential is not a staff credential.
    const ops = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')).serviceTokens.ops
      .token as string;
    assert.equal((await bearer(ops)('GET', '/v1/scim-credentials')).status, 403);
    assert.notEqual((await bearer(scimToken)('GET', '/v1/scim-credentials')).status, 200);
  });

  it('service tokens: issued with roles, rotated with a grace period, revoked and expired tokens refused at once', async () => {
    const issued = await admin('POST', '/v1/service-tokens', { name: 'reporting-job', roles: ['readonly'] });
    assert.equal(issued.status, 201, issued.text);
    const first = issued.json.token as string;
    assert.equal((await bearer(first)('GET', '/v1/countries')).status, 200);
    const list = await admin('GET', '/v1/service-tokens');
    assert.ok((list.json.items as { name: string }[]).some((t) => t.name === 'reporting-job'));
    assert.doesNotMatch(list.text, /svc_[A-Za-z0-9_-]{20}/);
    const rotated = await admin('POST', `/v1/service-tokens/${issued.json.id}:rotate`, {});
    assert.equal(rotated.status, 201, rotated.text);
    const second = rotated.json.token as string;
    assert.notEqual(second, first);
    assert.equal((await bearer(second)('GET', '/v1/countries')).status, 200);
    assert.equal(
      (await bearer(first)('GET', '/v1/countries')).status,
      200,
      'the previous token works during the grace period',
    );
    const immediate = await admin('POST', `/v1/service-tokens/${issued.json.id}:rotate`, {
      grace_seconds: 0,
    });
    const third = immediate.json.token as string;
    assert.equal(
      (
        await eventually(
          () => bearer(second)('GET', '/v1/countries'),
          (r) => r.status === 401,
        )
      ).status,
      401,
    );
    assert.equal((await bearer(first)('GET', '/v1/countries')).status, 401);
    assert.equal((await bearer(third)('GET', '/v1/countries')).status, 200);
    assert.equal((await admin('DELETE', `/v1/service-tokens/${issued.json.id}`)).status, 200);
    assert.equal(
      (
        await eventually(
          () => bearer(third)('GET', '/v1/countries'),
          (r) => r.status === 401,
        )
      ).status,
      401,
    );
    const expiring = await admin('POST', '/v1/service-tokens', {
      name: 'short-lived',
      roles: ['readonly'],
      expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    assert.equal((await bearer(expiring.json.token)('GET', '/v1/countries')).status, 200);
    await tdb.db.query(`UPDATE service_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, [
      expiring.json.id,
    ]);
    assert.equal(
      (
        await eventually(
          () => bearer(expiring.json.token)('GET', '/v1/countries'),
          (r) => r.status === 401,
        )
      ).status,
      401,
    );
    const { rows } = await tdb.db.query<{ action: string }>(
      `SELECT action FROM audit_log WHERE target->>'id' = $1 ORDER BY id`,
      [issued.json.id],
    );
    assert.deepEqual(
      rows.map((r) => r.action),
      ['service_token.issue', 'service_token.rotate', 'service_token.rotate', 'service_token.revoke'],
    );
    assert.equal(
      (await admin('POST', '/v1/service-tokens', { name: 'x', roles: ['scim'] })).status,
      400,
      'a machine never holds the scim role',
    );
  });

  it('wrong SCIM credentials and service tokens from one address are refused 429 past the threshold (run last: it throttles this address)', async () => {
    let last: Res | undefined;
    for (let i = 0; i < 12 && last?.status !== 429; i++) {
      last = await bearer(i % 2 ? `scim_wrong${i}` : `svc_wrong${i}`)(
        'GET',
        i % 2 ? '/scim/v2/Users' : '/v1/countries',
      );
      if (last.status !== 429) assert.equal(last.status, 401, last.text);
    }
    assert.equal(last?.status, 429, 'the address is throttled');
    assert.ok(Number(last?.headers['retry-after']) > 0);
    assert.equal(
      (await bearer(scimToken)('GET', '/scim/v2/Users')).status,
      429,
      'while it waits, even a right credential from it is refused',
    );
  });
});
