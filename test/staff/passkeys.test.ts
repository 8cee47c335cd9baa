/**
 * Staff passkeys against a real core and database (issue 16 items 1, 2 and its bad-input list),
 * with a software authenticator: enrolment from a one-time link, sign-in, own passkeys and
 * sessions, step-up bound to a request, and every refusal the issue names.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { origOf } from '../../shared/challenge.ts';
import { createEnrolmentLink, enrolmentTtlMs } from '../../core/staff/enrolment.ts';
import { setStaffRoles } from '../../core/staff/store.ts';
import { staffAudience, staffTokenTyp } from '../../core/staff/tokens.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { viaEdge } from '../helpers/edge-auth.ts';
import { call, type Res } from '../helpers/http.ts';
import { SoftAuthenticator, type Ceremony } from '../helpers/soft-authenticator.ts';

const origin = 'http://localhost';

describe('staff passkeys', () => {
  let c: TestCore;
  const post = (path: string, json: unknown, token?: string): Promise<Res> =>
    call(c.origin, 'POST', path, { json, headers: token ? { authorization: `Bearer ${token}` } : {} });
  const get = (path: string, token: string): Promise<Res> =>
    call(c.origin, 'GET', path, { headers: { authorization: `Bearer ${token}` } });

  async function newUser(tenant: string, name: string): Promise<string> {
    const id = randomUUID();
    await c.tdb.db.query('INSERT INTO staff_users (tenant_id, id, user_name) VALUES ($1, $2, $3)', [
      tenant,
      id,
      name,
    ]);
    await setStaffRoles(c.tdb.db, tenant, id, ['admin']);
    return id;
  }
  const link = (tenant: string, userId: string, now = Date.now()) =>
    c.tdb.db.tx((q) => createEnrolmentLink(q, tenant, userId, { type: 'test', id: 'suite' }, now));

  async function enrol(
    tenant: string,
    token: string,
    auth: SoftAuthenticator,
    ceremony: Ceremony = {},
  ): Promise<Res> {
    const begun = await post('/auth/enrolment/begin', { tenantId: tenant, token });
    assert.equal(begun.status, 200, begun.text);
    return post('/auth/enrolment/finish', {
      tenantId: tenant,
      token,
      response: auth.register(begun.json.options, ceremony),
      name: 'Laptop',
    });
  }
  async function signIn(
    tenant: string,
    auth: SoftAuthenticator,
    ceremony: Parameters<SoftAuthenticator['assert']>[1] = {},
  ): Promise<Res> {
    const begun = await post('/auth/login', { method: 'passkey', step: 'begin', tenantId: tenant });
    assert.equal(begun.status, 200, begun.text);
    return post('/auth/login', {
      method: 'passkey',
      step: 'finish',
      tenantId: tenant,
      response: auth.assert(begun.json.options, ceremony),
    });
  }
  /** A person with one enrolled passkey, signed in. */
  async function signedIn(tenant: string, name: string) {
    const userId = await newUser(tenant, name);
    const auth = new SoftAuthenticator(origin);
    assert.equal((await enrol(tenant, (await link(tenant, userId)).token, auth)).status, 201);
    const s = await signIn(tenant, auth);
    assert.equal(s.status, 200, s.text);
    return { userId, auth, token: s.json.accessToken as string };
  }

  before(async () => {
    c = await startTestCore();
    for (const id of ['op', 'other'])
      await c.tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
  });
  after(() => c?.close());

  it('enrols from a link, signs in at AAL 2, lists, renames and removes own passkeys and lists sessions', async () => {
    const userId = await newUser('op', 'grace@example.org');
    const auth = new SoftAuthenticator(origin);
    const l = await link('op', userId);
    assert.match(l.path, /^\/staff#tenant=op&enrol=enr_/);
    const done = await enrol('op', l.token, auth);
    assert.equal(done.status, 201, done.text);
    const s = await signIn('op', auth);
    assert.equal(s.status, 200, s.text);
    const claims = await c.keys.verify(s.json.accessToken, { audience: staffAudience, typ: staffTokenTyp });
    assert.equal(claims.sub, userId);
    assert.equal(claims.aal, 2);
    assert.deepEqual(claims.org_roles, ['admin']);
    // A second passkey through a new link; both listed.
    const phone = new SoftAuthenticator(origin);
    assert.equal((await enrol('op', (await link('op', userId)).token, phone)).status, 201);
    const list = await get('/auth/passkeys', s.json.accessToken);
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.passkeys.length, 2);
    const first = list.json.passkeys[0].id as string;
    const renamed = await call(c.origin, 'PATCH', `/auth/passkeys/${first}`, {
      json: { name: 'Work laptop' },
      headers: { authorization: `Bearer ${s.json.accessToken}` },
    });
    assert.equal(renamed.status, 204, renamed.text);
    assert.equal((await get('/auth/passkeys', s.json.accessToken)).json.passkeys[0].name, 'Work laptop');
    const sessions = await get('/auth/sessions', s.json.accessToken);
    assert.equal(sessions.status, 200);
    assert.ok(
      sessions.json.sessions.some(
        (x: { id: string; current: boolean }) => x.id === s.json.sessionId && x.current,
      ),
    );
    // Removing the first passkey: it no longer signs in; the other still does.
    assert.equal(
      (
        await call(c.origin, 'DELETE', `/auth/passkeys/${first}`, {
          headers: { authorization: `Bearer ${s.json.accessToken}` },
        })
      ).status,
      204,
    );
    assert.equal((await signIn('op', auth)).status, 401, 'a removed passkey cannot sign in');
    assert.equal((await signIn('op', phone)).status, 200);
    // Another person's passkey is not theirs to rename or remove.
    const other = await signedIn('op', 'mallory@example.org');
    const theirs = (await get('/auth/passkeys', other.token)).json.passkeys[0].id as string;
    assert.equal(
      (
        await call(c.origin, 'DELETE', `/auth/passkeys/${theirs}`, {
          headers: { authorization: `Bearer ${s.json.accessToken}` },
        })
      ).status,
      404,
    );
    const audit = await c.tdb.db.query(
      `SELECT action FROM audit_log WHERE tenant_id = 'op' AND actor->>'id' = $1 ORDER BY id`,
      [`staff:${userId}`],
    );
    for (const a of ['staff.passkey.register', 'staff.login', 'staff.passkey.rename', 'staff.passkey.remove'])
      assert.ok(
        audit.rows.some((r) => r.action === a),
        a,
      );
  });

  it('refuses an expired, reused or foreign-tenant enrolment link', async () => {
    const userId = await newUser('op', 'linus@example.org');
    const expired = await link('op', userId, Date.now() - enrolmentTtlMs - 1000);
    assert.equal(
      (await post('/auth/enrolment/begin', { tenantId: 'op', token: expired.token })).json.code,
      'ENROLMENT_INVALID',
    );
    const l = await link('op', userId);
    assert.equal(
      (await post('/auth/enrolment/begin', { tenantId: 'other', token: l.token })).status,
      401,
      'a link is good in its own tenant only',
    );
    assert.equal((await enrol('op', l.token, new SoftAuthenticator(origin))).status, 201);
    const again = await post('/auth/enrolment/begin', { tenantId: 'op', token: l.token });
    assert.equal(again.status, 401, 'a link is used once');
    assert.equal(again.json.code, 'ENROLMENT_INVALID');
    // A re-issued link replaces the unused one.
    const a = await link('op', userId);
    await link('op', userId);
    assert.equal((await post('/auth/enrolment/begin', { tenantId: 'op', token: a.token })).status, 401);
  });

  it('refuses a registration or an assertion from another origin or RP ID, or without user verification', async () => {
    const userId = await newUser('op', 'eve@example.org');
    const l = await link('op', userId);
    assert.equal((await enrol('op', l.token, new SoftAuthenticator('http://evil.example'))).status, 400);
    assert.equal(
      (await enrol('op', l.token, new SoftAuthenticator(origin), { rpId: 'evil.example' })).status,
      400,
    );
    assert.equal((await enrol('op', l.token, new SoftAuthenticator(origin), { uv: false })).status, 400);
    const { auth } = await signedIn('op', 'trent@example.org');
    for (const bad of [{ origin: 'http://evil.example' }, { rpId: 'evil.example' }, { uv: false }]) {
      const r = await signIn('op', auth, bad);
      assert.equal(r.status, 401, JSON.stringify(bad));
      assert.equal(r.json.code, 'INVALID_CREDENTIALS');
    }
    assert.equal((await signIn('other', auth)).status, 401, 'a passkey of one tenant signs in nowhere else');
  });

  it('refuses a replayed assertion: the same one twice, or one whose counter does not increase', async () => {
    const { auth } = await signedIn('op', 'replay@example.org');
    const begun = await post('/auth/login', { method: 'passkey', step: 'begin', tenantId: 'op' });
    const response = auth.assert(begun.json.options);
    assert.equal(
      (await post('/auth/login', { method: 'passkey', step: 'finish', tenantId: 'op', response })).status,
      200,
    );
    assert.equal(
      (await post('/auth/login', { method: 'passkey', step: 'finish', tenantId: 'op', response })).status,
      401,
      'the challenge is single use',
    );
    const cloned = await signIn('op', auth, { counter: auth.credentials[0]?.counter ?? 0 });
    assert.equal(cloned.status, 401, 'a counter that does not increase is a replay or a clone');
  });

  it("steps up for one named request with a single-use challenge; another person's passkey cannot", async () => {
    const me = await signedIn('op', 'stepper@example.org');
    const ch = await post('/auth/mfa/challenge', { method: 'POST', path: '/v1/admin/rotate-keys' }, me.token);
    assert.equal(ch.status, 200, ch.text);
    assert.deepEqual(ch.json.methods, ['passkey']);
    const response = me.auth.assert(ch.json.publicKey);
    const done = await post('/auth/mfa/complete', { challengeToken: ch.json.challenge, response }, me.token);
    assert.equal(done.status, 200, done.text);
    const claims = await c.keys.verify(done.json.accessToken, {
      audience: staffAudience,
      typ: staffTokenTyp,
    });
    assert.equal(claims.aal, 2);
    assert.equal(claims.orig, origOf('POST', '/v1/admin/rotate-keys', ''));
    assert.notEqual(
      claims.orig,
      origOf('POST', '/v1/tenants/op:suspend', ''),
      'bound to that request, not another action',
    );
    const twice = await post(
      '/auth/mfa/complete',
      { challengeToken: ch.json.challenge, response: me.auth.assert(ch.json.publicKey) },
      me.token,
    );
    assert.equal(twice.status, 403, 'a challenge is used once');
    assert.equal(twice.json.code, 'challenge_mismatch');
    // Someone else's passkey over my challenge.
    const other = await signedIn('op', 'other-stepper@example.org');
    const mine = await post('/auth/mfa/challenge', { method: 'DELETE', path: '/sessions/x' }, me.token);
    assert.equal(
      (
        await post(
          '/auth/mfa/complete',
          { challengeToken: mine.json.challenge, response: other.auth.assert(mine.json.publicKey) },
          me.token,
        )
      ).status,
      401,
    );
    // My challenge presented with their token.
    assert.equal(
      (
        await post(
          '/auth/mfa/complete',
          { challengeToken: mine.json.challenge, response: me.auth.assert(mine.json.publicKey) },
          other.token,
        )
      ).json.code,
      'challenge_mismatch',
    );
  });

  it('a deprovisioned person can no longer use their session, sign in or step up', async () => {
    const me = await signedIn('op', 'leaver@example.org');
    const ch = await post('/auth/mfa/challenge', { method: 'POST', path: '/v1/admin/rotate-keys' }, me.token);
    assert.equal(ch.status, 200);
    await c.tdb.db.query('UPDATE staff_users SET active = false WHERE id = $1', [me.userId]);
    assert.equal((await get('/auth/passkeys', me.token)).status, 401);
    assert.equal(
      (
        await post(
          '/auth/mfa/complete',
          { challengeToken: ch.json.challenge, response: me.auth.assert(ch.json.publicKey) },
          me.token,
        )
      ).status,
      401,
    );
    assert.equal((await signIn('op', me.auth)).status, 401);
  });

  it('an Admin re-issues a link for a member of their own tenant only, shown once, audited', async () => {
    const userId = await newUser('op', 'lost-passkey@example.org');
    const outsider = await newUser('other', 'outsider@example.org');
    const as = (path: string) =>
      call(c.origin, 'POST', path, {
        headers: viaEdge({
          'x-tenant-id': 'op',
          'x-principal-id': 'admin-1',
          'x-roles': 'admin',
          'x-request-id': randomUUID(),
          'idempotency-key': `reissue-${randomUUID()}`,
        }),
      });
    const r = await as(`/v1/staff/users/${userId}/enrolment-links`);
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.token, /^enr_/);
    assert.equal((await enrol('op', r.json.token, new SoftAuthenticator(origin))).status, 201);
    assert.equal((await as(`/v1/staff/users/${outsider}/enrolment-links`)).status, 404);
    const stored = await c.tdb.db.query('SELECT token_hash FROM staff_enrolment_links WHERE user_id = $1', [
      userId,
    ]);
    assert.ok(
      !stored.rows.some((x) => Buffer.from(x.token_hash).toString('utf8').includes(r.json.token)),
      'only a hash is stored',
    );
    const audit = await c.tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'op' AND action = 'staff.enrolment_link.create' AND actor->>'id' = 'admin-1'`,
    );
    assert.equal(audit.rows.length, 1);
  });
});
