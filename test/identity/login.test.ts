import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { verifyChain } from '../../shared/audit.ts';
import { PinHasher } from '../../core/identity/pin.ts';
import { SecretStore } from '../../core/identity/secrets.ts';
import { issuerFor } from '../../core/keys/keys.ts';
import { count, startHarness, type Harness } from './harness.ts';

describe('customer identity: phone verification, PIN, login, lockout', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(() => h.close());

  it('onboards and logs in: AAL 1 EdDSA access token with the SPEC claims, session and membership tuple', async () => {
    const tok = await h.onboard('ta', '+254700000001', '482915');
    assert.equal(tok.aal, 1);
    assert.equal(tok.expiresIn, 600);
    const header = decodeProtectedHeader(tok.accessToken);
    assert.equal(header.alg, 'EdDSA');
    assert.equal(header.typ, 'at+jwt');
    const c = decodeJwt(tok.accessToken);
    assert.equal(c.aud, 'payments-api');
    assert.equal(c.iss, issuerFor('ta'));
    assert.equal(c.tid, 'ta');
    assert.equal(c.sid, tok.sessionId);
    assert.equal(c.aal, 1);
    assert.deepEqual(c.amr, ['pin']);
    assert.equal((c.exp ?? 0) - (c.iat ?? 0), 600);
    const s = await h.tdb.db.query(
      `SELECT subject_type, subject_id, jti, aal, revoked_at FROM sessions WHERE id = $1 AND tenant_id = 'ta'`,
      [tok.sessionId],
    );
    assert.deepEqual(s.rows[0], {
      subject_type: 'customer',
      subject_id: c.sub,
      jti: c.jti,
      aal: 1,
      revoked_at: null,
    });
    const t = await h.tdb.db.query(
      `SELECT 1 FROM relationship_tuples WHERE tenant_id = 'ta' AND subject_ns = 'customer' AND subject_id = $1 AND relation = 'member' AND object_ns = 'tenant' AND object_id = 'ta'`,
      [c.sub],
    );
    assert.equal(t.rows.length, 1);
    const cred = await h.tdb.db.query<{ kdf_version: number; pin_hash: Buffer; pin_salt: Buffer }>(
      'SELECT kdf_version, pin_hash, pin_salt FROM credentials WHERE customer_id = $1',
      [c.sub],
    );
    assert.equal(cred.rows[0]?.kdf_version, 2);
    assert.equal(cred.rows[0]?.pin_hash.length, 32);
    assert.ok(!cred.rows[0]?.pin_hash.includes(Buffer.from('482915')));
  });

  it('refuses bad input with 400 VALIDATION_FAILED and stores nothing', async () => {
    const before = {
      c: await count(h, 'customers'),
      o: await count(h, 'otp_codes'),
      a: await count(h, 'audit_log'),
      th: await count(h, 'auth_throttle'),
    };
    const cases: [string, unknown][] = [
      ['/customers/auth/otp/send', { tenantId: 'ta', phone: '0700000001' }],
      ['/customers/auth/otp/send', { tenantId: 'ta', phone: '+12345' }],
      ['/customers/auth/otp/send', { tenantId: 'ta', phone: '+1234567890123456' }],
      ['/customers/auth/otp/send', { tenantId: 'ta' }],
      ['/customers/auth/otp/verify', { tenantId: 'ta', phone: '+254700000001', otp: '123' }],
      ['/customers/auth/otp/verify', { tenantId: 'ta', phone: '+254700000001', otp: '123456789' }],
      [
        '/customers/auth/pin/set',
        { tenantId: 'ta', phone: '+254700000001', pin: '123', verificationToken: 'x'.repeat(43) },
      ],
      [
        '/customers/auth/pin/set',
        { tenantId: 'ta', phone: '+254700000001', pin: '1234567', verificationToken: 'x'.repeat(43) },
      ],
      [
        '/customers/auth/pin/set',
        { tenantId: 'ta', phone: '+254700000001', pin: '12a4', verificationToken: 'x'.repeat(43) },
      ],
      ['/customers/auth/login', { tenantId: 'ta', phone: '+254700000001' }],
      ['/customers/auth/login', { tenantId: 'ta', phone: 'abc', pin: '1234' }],
      ['/customers/auth/login', { phone: '+254700000001', pin: '1234' }],
    ];
    for (const [path, body] of cases) {
      const r = await h.post(path, body);
      assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}`);
      assert.equal(r.json.code, 'VALIDATION_FAILED');
    }
    assert.deepEqual(
      {
        c: await count(h, 'customers'),
        o: await count(h, 'otp_codes'),
        a: await count(h, 'audit_log'),
        th: await count(h, 'auth_throttle'),
      },
      before,
    );
  });

  it('unknown tenant: otp/send 404 TENANT_NOT_FOUND, login the uniform 401', async () => {
    const s = await h.post('/customers/auth/otp/send', { tenantId: 'nope', phone: '+254700000009' });
    assert.equal(s.status, 404);
    assert.equal(s.json.code, 'TENANT_NOT_FOUND');
    const l = await h.post('/customers/auth/login', {
      tenantId: 'nope',
      phone: '+254700000009',
      pin: '1234',
    });
    assert.equal(l.status, 401);
    assert.deepEqual(l.json, { code: 'INVALID_CREDENTIALS', message: 'invalid credentials' });
    assert.equal(await count(h, "identity_tenant_secrets WHERE tenant_id = 'nope'"), 0);
  });

  it('verificationToken is single use and expires; an OTP is single use', async () => {
    const phone = '+254700000002';
    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    const code = h.sms.lastCode(phone);
    assert.match(code, /^[0-9]{6}$/);
    const v = await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: code });
    assert.equal(v.status, 200);
    const again = await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: code });
    assert.equal(again.status, 401);
    assert.equal(again.json.code, 'OTP_INVALID');
    const tokenA = v.json.verificationToken as string;
    assert.equal(
      (
        await h.post('/customers/auth/pin/set', {
          tenantId: 'ta',
          phone,
          pin: '739164',
          verificationToken: tokenA,
        })
      ).status,
      204,
    );
    const reuse = await h.post('/customers/auth/pin/set', {
      tenantId: 'ta',
      phone,
      pin: '902817',
      verificationToken: tokenA,
    });
    assert.equal(reuse.status, 401);
    assert.equal(reuse.json.code, 'VERIFICATION_INVALID');
    // The first PIN still works: the refused reuse changed nothing.
    assert.equal(
      (await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '739164' })).status,
      200,
    );

    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    const v2 = await h.post('/customers/auth/otp/verify', {
      tenantId: 'ta',
      phone,
      otp: h.sms.lastCode(phone),
    });
    h.clock.t += 11 * 60_000;
    const expired = await h.post('/customers/auth/pin/set', {
      tenantId: 'ta',
      phone,
      pin: '902817',
      verificationToken: v2.json.verificationToken,
    });
    assert.equal(expired.status, 401);
    assert.equal(expired.json.code, 'VERIFICATION_INVALID');
    // A token for one phone does not set another phone's PIN.
    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    const v3 = await h.post('/customers/auth/otp/verify', {
      tenantId: 'ta',
      phone,
      otp: h.sms.lastCode(phone),
    });
    const other = await h.post('/customers/auth/pin/set', {
      tenantId: 'ta',
      phone: '+254700000001',
      pin: '902817',
      verificationToken: v3.json.verificationToken,
    });
    assert.equal(other.json.code, 'VERIFICATION_INVALID');
    const weak = await h.post('/customers/auth/pin/set', {
      tenantId: 'ta',
      phone,
      pin: '1234',
      verificationToken: v3.json.verificationToken,
    });
    assert.equal(weak.status, 422);
  });

  it('OTP: expires after 5 minutes, at most 5 guesses per code, and a new code does not reset the failure count', async () => {
    const phone = '+254700000003';
    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    h.clock.t += 5 * 60_000 + 1;
    assert.equal(
      (await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: h.sms.lastCode(phone) })).json
        .code,
      'OTP_INVALID',
    );

    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    const good = h.sms.lastCode(phone);
    const wrong = good === '000000' ? '111111' : '000000';
    for (let i = 0; i < 5; i++)
      assert.equal(
        (await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: wrong })).status,
        401,
      );
    const dead = await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: good });
    assert.equal(dead.json.code, 'OTP_INVALID', 'the code died after 5 wrong guesses');

    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    const fresh = h.sms.lastCode(phone);
    for (let i = 0; i < 3; i++)
      await h.post('/customers/auth/otp/verify', {
        tenantId: 'ta',
        phone,
        otp: fresh === '000000' ? '111111' : '000000',
      });
    // 6 + 3 = 9 failures counted per phone across codes; the 10th guess locks it.
    await h.post('/customers/auth/otp/verify', {
      tenantId: 'ta',
      phone,
      otp: fresh === '000000' ? '111111' : '000000',
    });
    const locked = await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: fresh });
    assert.equal(locked.status, 429);
    assert.equal(locked.json.code, 'LOCKED');
    assert.ok(Number(locked.headers['retry-after']) > 0);
  });

  it('wrong PIN ×5 locks; every answer matches an unknown phone, including the locked one', async () => {
    const known = '+254700000004';
    const unknown = '+254799999999';
    await h.onboard('ta', known, '502938');
    const strip = (r: { status: number; json: unknown; headers: Record<string, string> }) => ({
      status: r.status,
      body: r.json,
      retry: r.headers['retry-after'],
    });
    for (let i = 0; i < 5; i++) {
      const a = await h.post('/customers/auth/login', { tenantId: 'ta', phone: known, pin: '111000' });
      const b = await h.post('/customers/auth/login', { tenantId: 'ta', phone: unknown, pin: '111000' });
      assert.deepEqual(strip(a), strip(b));
      assert.deepEqual(a.json, { code: 'INVALID_CREDENTIALS', message: 'invalid credentials' });
    }
    const a = await h.post('/customers/auth/login', { tenantId: 'ta', phone: known, pin: '502938' });
    const b = await h.post('/customers/auth/login', { tenantId: 'ta', phone: unknown, pin: '502938' });
    assert.equal(a.status, 429);
    assert.equal(a.json.code, 'LOCKED');
    assert.deepEqual(strip(a), strip(b));
    assert.equal(a.headers['retry-after'], String(15 * 60));
    // Progressive: after the lock, one more failure locks for twice as long.
    h.clock.t += 15 * 60_000;
    await h.post('/customers/auth/login', { tenantId: 'ta', phone: known, pin: '111000' });
    const again = await h.post('/customers/auth/login', { tenantId: 'ta', phone: known, pin: '502938' });
    assert.equal(again.headers['retry-after'], String(30 * 60));
    // Counters are keyed by HMAC: the raw phone appears in no counter or audit row.
    const leak = await h.tdb.db.query(
      `SELECT 1 FROM audit_log WHERE attrs::text LIKE '%254700000004%' OR actor::text LIKE '%254700000004%' OR target::text LIKE '%254700000004%'`,
    );
    assert.equal(leak.rows.length, 0);
    const audits = await h.tdb.db.query(
      `SELECT count(*)::int AS n FROM audit_log WHERE action = 'auth.login' AND tenant_id = 'ta'`,
    );
    assert.ok((audits.rows[0] as { n: number }).n >= 14, 'every attempt, refused ones included, is audited');
  });

  it('10 failures in a day require OTP re-verification before the next PIN attempt', async () => {
    const phone = '+254700000005';
    await h.onboard('ta', phone, '615243');
    const fail = () => h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '999000' });
    for (let i = 0; i < 5; i++) await fail();
    for (const minutes of [15, 30, 60, 120, 240]) {
      h.clock.t += minutes * 60_000;
      assert.equal((await fail()).status, 401);
    }
    h.clock.t += 480 * 60_000;
    const r = await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '615243' });
    assert.equal(r.status, 403);
    assert.equal(r.json.code, 'VERIFICATION_REQUIRED');
    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    assert.equal(
      (await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: h.sms.lastCode(phone) }))
        .status,
      200,
    );
    assert.equal(
      (await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '615243' })).status,
      200,
    );
  });

  it('a legacy kdf_version is rehashed in the background after a successful login', async () => {
    const phone = '+254700000006';
    const tok = await h.onboard('ta', phone, '820461');
    const sub = decodeJwt(tok.accessToken).sub;
    const pepper = (await new SecretStore(h.tdb.db, h.keys).get('ta'))?.pin;
    assert.ok(pepper);
    const legacy = await new PinHasher().hash('820461', pepper, 1);
    await h.tdb.db.query(
      'UPDATE credentials SET pin_hash = $2, pin_salt = $3, kdf_version = 1 WHERE customer_id = $1',
      [sub, legacy.hash, legacy.salt],
    );
    assert.equal(
      (await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '820461' })).status,
      200,
    );
    let version = 1;
    for (let i = 0; i < 100 && version === 1; i++) {
      await new Promise((r) => setTimeout(r, 20));
      version =
        (
          await h.tdb.db.query<{ kdf_version: number }>(
            'SELECT kdf_version FROM credentials WHERE customer_id = $1',
            [sub],
          )
        ).rows[0]?.kdf_version ?? 0;
    }
    assert.equal(version, 2);
    assert.equal(
      (await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '820461' })).status,
      200,
    );
  });

  it('the audit chain verifies and holds no PIN, code or token', async () => {
    const report = await verifyChain(h.tdb.db, 'ta');
    assert.equal(report.ok, true);
    const { rows } = await h.tdb.db.query<{ t: string }>(
      `SELECT string_agg(actor::text || target::text || decision::text || attrs::text, ' ') AS t FROM audit_log`,
    );
    const text = rows[0]?.t ?? '';
    for (const secret of ['482915', '502938', '615243', ...h.sms.sent.map((m) => m.code)])
      assert.ok(!text.includes(`"${secret}"`), 'secret in audit');
  });
});
