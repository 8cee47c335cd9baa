import assert from 'node:assert/strict';
import { generateKeyPairSync, sign } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { decodeJwt } from 'jose';
import { issueChallenge, origOf } from '../../shared/challenge.ts';
import { bearer, startHarness, withStepUp, type Harness, type Tokens } from './harness.ts';

describe('customer identity: sessions, refresh rotation, step-up, devices, tenant isolation', () => {
  let h: Harness;
  let listener: pg.Client;
  const notes: { tenantId: string; sessionId: string }[] = [];
  let alice: Tokens;
  let aliceId: string;
  const transfer = { amount: '100.00', currency: 'KES', to: 'bene-1' };
  before(async () => {
    h = await startHarness([
      { id: 'ta' },
      { id: 'tb' },
      { id: 'tidle', security: { session_timeout_minutes: 1 } },
      { id: 'tmfa', security: { mfa_required_for_all_users: true } },
    ]);
    listener = new pg.Client({ connectionString: h.tdb.url });
    await listener.connect();
    listener.on('notification', (n) =>
      notes.push(JSON.parse(n.payload ?? '{}') as { tenantId: string; sessionId: string }),
    );
    await listener.query('LISTEN sessions_changed');
    alice = await h.onboard('ta', '+254711000001', '639017');
    aliceId = String(decodeJwt(alice.accessToken).sub);
  });
  after(async () => {
    await listener.end();
    await h.close();
  });
  const waitFor = async (pred: () => boolean) => {
    for (let i = 0; i < 100 && !pred(); i++) await new Promise((r) => setTimeout(r, 10));
    return pred();
  };

  it('refresh rotates; replaying a rotated token revokes the family and the session, with NOTIFY, outbox and audit', async () => {
    const tok = await h.onboard('ta', '+254711000002', '720483');
    const r1 = await h.post('/customers/auth/token/refresh', {
      tenantId: 'ta',
      refreshToken: tok.refreshToken,
    });
    assert.equal(r1.status, 200);
    assert.notEqual(r1.json.refreshToken, tok.refreshToken);
    assert.equal(r1.json.sessionId, tok.sessionId);
    const r2 = await h.post('/customers/auth/token/refresh', {
      tenantId: 'ta',
      refreshToken: r1.json.refreshToken,
    });
    assert.equal(r2.status, 200);
    const replay = await h.post('/customers/auth/token/refresh', {
      tenantId: 'ta',
      refreshToken: tok.refreshToken,
    });
    assert.equal(replay.status, 401);
    assert.equal(replay.json.code, 'INVALID_REFRESH_TOKEN');
    // The newest token of the family is dead too, and so is the session's access token.
    assert.equal(
      (await h.post('/customers/auth/token/refresh', { tenantId: 'ta', refreshToken: r2.json.refreshToken }))
        .status,
      401,
    );
    assert.equal(
      (await h.get('/customers/sessions', bearer(r2.json.accessToken))).json.code,
      'session_revoked',
    );
    const s = await h.tdb.db.query(`SELECT revoke_reason FROM sessions WHERE tenant_id = 'ta' AND id = $1`, [
      tok.sessionId,
    ]);
    assert.equal((s.rows[0] as { revoke_reason: string }).revoke_reason, 'refresh_replay');
    assert.ok(
      await waitFor(() => notes.some((n) => n.sessionId === tok.sessionId && n.tenantId === 'ta')),
      'NOTIFY sessions_changed',
    );
    const ob = await h.tdb.db.query(
      `SELECT 1 FROM outbox WHERE event = 'session.revoked' AND aggregate_id = $1`,
      [tok.sessionId],
    );
    assert.equal(ob.rows.length, 1);
    const au = await h.tdb.db.query(
      `SELECT 1 FROM audit_log WHERE action = 'auth.refresh' AND attrs->>'outcome' = 'replay_detected_family_revoked'`,
    );
    assert.equal(au.rows.length, 1);
  });

  it('lists own sessions, revokes one, logs out; another customer cannot revoke mine', async () => {
    const second = await h.post('/customers/auth/login', {
      tenantId: 'ta',
      phone: '+254711000001',
      pin: '639017',
    });
    const list = await h.get('/customers/sessions', bearer(alice.accessToken));
    assert.equal(list.status, 200);
    const ids = (list.json.sessions as { id: string; current: boolean }[]).map((s) => s.id);
    assert.ok(ids.includes(alice.sessionId) && ids.includes(second.json.sessionId));
    const bob = await h.onboard('ta', '+254711000003', '518204');
    // Ending another session needs a step-up bound to that request; even then not another customer's.
    const steal = await withStepUp(
      h,
      bob.accessToken,
      '+254711000003',
      'DELETE',
      `/customers/sessions/${second.json.sessionId}`,
    );
    assert.equal(steal.first.json.code, 'MFA_REQUIRED');
    assert.equal(steal.final.status, 404);
    const mine = await withStepUp(
      h,
      alice.accessToken,
      '+254711000001',
      'DELETE',
      `/customers/sessions/${second.json.sessionId}`,
    );
    assert.equal(mine.first.status, 403);
    assert.equal(mine.first.json.code, 'MFA_REQUIRED');
    assert.equal(
      decodeJwt(mine.first.json.challenge).orig,
      origOf('DELETE', `/customers/sessions/${second.json.sessionId}`, ''),
    );
    assert.equal(mine.final.status, 204);
    assert.equal((await h.get('/customers/sessions', bearer(second.json.accessToken))).status, 401);
    assert.equal((await h.post('/customers/auth/logout', {}, bearer(bob.accessToken))).status, 204);
    assert.equal(
      (await h.post('/customers/auth/token/refresh', { tenantId: 'ta', refreshToken: bob.refreshToken }))
        .status,
      401,
    );
    assert.ok(await waitFor(() => notes.some((n) => n.sessionId === bob.sessionId)));
  });

  it('step-up with an OTP bound to the challenge gives an AAL 2 token; the challenge is single use', async () => {
    const orig = origOf('POST', '/v1/transfers', JSON.stringify(transfer));
    const challenge = await issueChallenge(h.keys.challenges, {
      tenantId: 'ta',
      sub: aliceId,
      orig,
      methods: ['otp'],
    });
    assert.equal(
      (await h.post('/customers/auth/stepup/otp', { challengeToken: challenge }, bearer(alice.accessToken)))
        .status,
      202,
    );
    const code = h.sms.lastCode('+254711000001');
    const wrong = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: challenge, otp: code === '000000' ? '111111' : '000000' },
      bearer(alice.accessToken),
    );
    assert.equal(wrong.status, 401);
    assert.equal(wrong.json.code, 'OTP_INVALID');
    const ok = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: challenge, otp: code, deviceAssertion: null },
      bearer(alice.accessToken),
    );
    assert.equal(ok.status, 200);
    assert.equal(ok.json.aal, 2);
    assert.equal(ok.json.expiresIn, 600);
    const c = decodeJwt(ok.json.accessToken);
    assert.equal(c.aal, 2);
    assert.deepEqual(c.amr, ['pin', 'otp']);
    assert.equal(c.orig, orig);
    assert.equal(c.sid, alice.sessionId);
    const again = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: challenge, otp: code },
      bearer(alice.accessToken),
    );
    assert.equal(again.status, 403);
    assert.equal(again.json.code, 'challenge_mismatch');
    alice = { ...alice, accessToken: ok.json.accessToken };
  });

  it("refuses an expired challenge, another customer's, a wrong kind and another request's", async () => {
    const orig = origOf('POST', '/v1/transfers', JSON.stringify(transfer));
    const bob = await h.onboard('ta', '+254711000004', '305918');
    const bobs = await issueChallenge(h.keys.challenges, {
      tenantId: 'ta',
      sub: String(decodeJwt(bob.accessToken).sub),
      orig,
      methods: ['otp'],
    });
    const r1 = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: bobs, otp: '123456' },
      bearer(alice.accessToken),
    );
    assert.equal(r1.status, 403);
    assert.equal(r1.json.code, 'challenge_mismatch');
    const kind = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: alice.accessToken, otp: '123456' },
      bearer(alice.accessToken),
    );
    assert.equal(kind.json.code, 'challenge_mismatch');
    const old = await issueChallenge(h.keys.challenges, {
      tenantId: 'ta',
      sub: aliceId,
      orig,
      methods: ['otp'],
    });
    h.clock.t += 301_000;
    const fresh = await h.post('/customers/auth/login', {
      tenantId: 'ta',
      phone: '+254711000001',
      pin: '639017',
    });
    const exp = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: old, otp: '123456' },
      bearer(fresh.json.accessToken),
    );
    assert.equal(exp.status, 403);
    assert.equal(exp.json.code, 'challenge_mismatch');
    // Bound to the request: the same body in another key order has the same orig; any other body does not.
    assert.equal(origOf('POST', '/v1/transfers', '{"to":"bene-1","currency":"KES","amount":"100.00"}'), orig);
    assert.notEqual(
      origOf('POST', '/v1/transfers', JSON.stringify({ ...transfer, amount: '1000.00' })),
      orig,
    );
    const { verifyChallenge } = await import('../../shared/challenge.ts');
    const ch = await issueChallenge(h.keys.challenges, {
      tenantId: 'ta',
      sub: aliceId,
      orig,
      methods: ['otp'],
    });
    await assert.rejects(
      verifyChallenge(h.keys.challenges, ch, {
        tenantId: 'ta',
        sub: aliceId,
        orig: origOf('POST', '/v1/transfers', '{"amount":"9"}'),
      }),
      (e: { code?: string }) => e.code === 'challenge_mismatch',
    );
    alice = fresh.json as Tokens;
  });

  it('device keys: registering needs AAL 2; a signature over the challenge then steps up with amr device', async () => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const jwk = publicKey.export({ format: 'jwk' });
    const body = { publicKey: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, label: 'phone' };
    const need = await h.post('/customers/devices', body, bearer(alice.accessToken));
    assert.equal(need.status, 403);
    assert.equal(need.json.code, 'MFA_REQUIRED');
    assert.deepEqual(need.json.methods, ['otp']);
    assert.equal(
      decodeJwt(need.json.challenge).orig,
      origOf('POST', '/customers/devices', JSON.stringify(body)),
    );
    await h.post(
      '/customers/auth/stepup/otp',
      { challengeToken: need.json.challenge },
      bearer(alice.accessToken),
    );
    const up = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: need.json.challenge, otp: h.sms.lastCode('+254711000001') },
      bearer(alice.accessToken),
    );
    assert.equal(up.status, 200);
    const reg = await h.post('/customers/devices', body, bearer(up.json.accessToken));
    assert.equal(reg.status, 201);
    const deviceId = reg.json.deviceId as string;
    // Usable only after the cool-off (default 24 h): a fresh login a day later.
    h.clock.t += 24 * 3_600_000;
    alice = (await h.post('/customers/auth/login', { tenantId: 'ta', phone: '+254711000001', pin: '639017' }))
      .json as Tokens;

    const ch = await issueChallenge(h.keys.challenges, {
      tenantId: 'ta',
      sub: aliceId,
      orig: 'x',
      methods: ['otp', 'device'],
    });
    const forged = sign(null, Buffer.from(`${ch}.`), privateKey).toString('base64url');
    const bad = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, deviceAssertion: { deviceId, signature: forged } },
      bearer(alice.accessToken),
    );
    assert.equal(bad.status, 401);
    assert.equal(bad.json.code, 'DEVICE_ASSERTION_INVALID');
    const signature = sign(null, Buffer.from(ch, 'utf8'), privateKey).toString('base64url');
    const ok = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, deviceAssertion: { deviceId, signature } },
      bearer(alice.accessToken),
    );
    assert.equal(ok.status, 200);
    assert.deepEqual(decodeJwt(ok.json.accessToken).amr, ['pin', 'device']);
    const both = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: ch, otp: '123456', deviceAssertion: { deviceId, signature } },
      bearer(alice.accessToken),
    );
    assert.equal(both.status, 400);
  });

  it('device keys: a small-order, non-canonical or off-curve public key is refused 400 PUBLIC_KEY_INVALID', async () => {
    const weak = {
      zero: Buffer.alloc(32),
      identity: Buffer.from('01'.padEnd(64, '0'), 'hex'),
      order8: Buffer.from('c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', 'hex'),
      yAtLeastP: Buffer.from(`ed${'ff'.repeat(30)}7f`, 'hex'),
      offCurve: Buffer.from('02'.padEnd(64, '0'), 'hex'),
    };
    for (const [name, raw] of Object.entries(weak)) {
      for (const publicKey of [
        raw.toString('base64url'),
        { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') },
      ]) {
        const body = { publicKey, label: name };
        let r = await h.post('/customers/devices', body, bearer(alice.accessToken));
        if (r.json.code === 'MFA_REQUIRED') {
          // Whether the key is judged before or after the step-up, it is never registered.
          await h.post(
            '/customers/auth/stepup/otp',
            { challengeToken: r.json.challenge },
            bearer(alice.accessToken),
          );
          const up = await h.post(
            '/customers/auth/stepup/complete',
            { challengeToken: r.json.challenge, otp: h.sms.lastCode('+254711000001') },
            bearer(alice.accessToken),
          );
          r = await h.post('/customers/devices', body, bearer(up.json.accessToken));
        }
        assert.equal(r.status, 400, `${name}: ${r.text}`);
        assert.equal(r.json.code, 'PUBLIC_KEY_INVALID', name);
      }
    }
    const { rows } = await h.tdb.db.query(`SELECT 1 FROM customer_devices WHERE label = ANY($1)`, [
      Object.keys(weak),
    ]);
    assert.equal(rows.length, 0);
  });

  it("tenant A's tokens do not work for tenant B", async () => {
    const viaB = await h.get('/customers/sessions', bearer(alice.accessToken, { 'x-tenant-id': 'tb' }));
    assert.equal(viaB.status, 403);
    assert.equal(viaB.json.code, 'TENANT_MISMATCH');
    const [hd, p, s] = alice.accessToken.split('.');
    const claims = JSON.parse(Buffer.from(String(p), 'base64url').toString()) as Record<string, unknown>;
    const forged = `${hd}.${Buffer.from(JSON.stringify({ ...claims, tid: 'tb' })).toString('base64url')}.${s}`;
    assert.equal((await h.get('/customers/sessions', bearer(forged))).json.code, 'invalid_token');
    const rt = await h.post('/customers/auth/token/refresh', {
      tenantId: 'tb',
      refreshToken: alice.refreshToken,
    });
    assert.equal(rt.status, 401);
    assert.equal(rt.json.code, 'INVALID_REFRESH_TOKEN');
    const chB = await issueChallenge(h.keys.challenges, {
      tenantId: 'tb',
      sub: aliceId,
      orig: 'x',
      methods: ['otp'],
    });
    assert.equal(
      (
        await h.post(
          '/customers/auth/stepup/complete',
          { challengeToken: chB, otp: '123456' },
          bearer(alice.accessToken),
        )
      ).json.code,
      'challenge_mismatch',
    );
    const loginB = await h.post('/customers/auth/login', {
      tenantId: 'tb',
      phone: '+254711000001',
      pin: '639017',
    });
    assert.equal(loginB.status, 401);
    // Still usable in its own tenant.
    assert.equal(
      (await h.post('/customers/auth/token/refresh', { tenantId: 'ta', refreshToken: alice.refreshToken }))
        .status,
      200,
    );
  });

  it('session_timeout_minutes: an idle session cannot be refreshed', async () => {
    const tok = await h.onboard('tidle', '+254711000005', '847261');
    h.clock.t += 2 * 60_000;
    const r = await h.post('/customers/auth/token/refresh', {
      tenantId: 'tidle',
      refreshToken: tok.refreshToken,
    });
    assert.equal(r.status, 401);
    const s = await h.tdb.db.query(`SELECT revoke_reason FROM sessions WHERE id = $1`, [tok.sessionId]);
    assert.equal((s.rows[0] as { revoke_reason: string }).revoke_reason, 'idle_timeout');
  });

  it('mfa_required_for_all_users: login carries a challenge; refresh waits for the step-up', async () => {
    const tok = (await h.onboard('tmfa', '+254711000006', '194857')) as Tokens & {
      mfaRequired?: boolean;
      challenge?: string;
    };
    assert.equal(tok.mfaRequired, true);
    assert.ok(tok.challenge);
    const early = await h.post('/customers/auth/token/refresh', {
      tenantId: 'tmfa',
      refreshToken: tok.refreshToken,
    });
    assert.equal(early.status, 403);
    assert.equal(early.json.code, 'MFA_REQUIRED');
    await h.post('/customers/auth/stepup/otp', { challengeToken: tok.challenge }, bearer(tok.accessToken));
    const up = await h.post(
      '/customers/auth/stepup/complete',
      { challengeToken: tok.challenge, otp: h.sms.lastCode('+254711000006') },
      bearer(tok.accessToken),
    );
    assert.equal(up.status, 200);
    assert.equal(
      (await h.post('/customers/auth/token/refresh', { tenantId: 'tmfa', refreshToken: tok.refreshToken }))
        .status,
      200,
    );
  });

  it('publishes the tenant JWKS; unknown tenant is 404', async () => {
    const j = await h.get('/.well-known/jwks.json?tenant=ta');
    assert.equal(j.status, 200);
    assert.ok(
      (j.json.keys as { kid: string; kty: string; crv: string; d?: string }[]).every(
        (k) => k.kty === 'OKP' && k.crv === 'Ed25519' && k.d === undefined,
      ),
    );
    assert.ok(
      (j.json.keys as { kid: string }[]).some(
        (k) =>
          k.kid ===
          (
            JSON.parse(Buffer.from(alice.accessToken.split('.')[0] ?? '', 'base64url').toString()) as {
              kid: string;
            }
          ).kid,
      ),
    );
    assert.equal((await h.get('/.well-known/jwks.json?tenant=zz-none')).json.code, 'TENANT_NOT_FOUND');
  });
});
