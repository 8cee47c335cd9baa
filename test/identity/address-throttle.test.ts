import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { freshIp, startHarness, type Harness } from './harness.ts';
import type { Res } from '../helpers/http.ts';

/** Issue 13 item 4: a shared address (carrier NAT) is throttled past a high threshold, never locked out at 5. */
describe('customer login: the source address is a carrier-NAT-sized throttle', () => {
  let h: Harness;
  const low = {
    address_throttle: { failures: 20, window_minutes: 10, delay_seconds: 30, max_delay_minutes: 2 },
  };
  before(async () => {
    h = await startHarness([
      { id: 'ta' },
      { id: 'tlow', security: low },
      { id: 'tlow2', security: low },
      { id: 'tbad', security: { address_throttle: { failures: 5 } } },
    ]);
  });
  after(() => h.close());

  let seq = 0;
  /** One failed login for a phone no other attempt uses (so no per-phone lock interferes). */
  const fail = async (tenantId: string, ip: string): Promise<Res> => {
    seq++;
    return h.post(
      '/customers/auth/login',
      { tenantId, phone: `+2547300${String(seq).padStart(5, '0')}`, pin: '4711' },
      { 'x-client-ip': ip },
    );
  };
  /** `n` failed logins from `ip`, a few at a time; each must be the uniform 401. */
  const failMany = async (tenantId: string, ip: string | (() => string), n: number): Promise<void> => {
    for (let done = 0; done < n; done += 4) {
      const batch = Array.from({ length: Math.min(4, n - done) }, () =>
        fail(tenantId, typeof ip === 'string' ? ip : ip()),
      );
      for (const r of await Promise.all(batch)) assert.equal(r.status, 401, r.text);
    }
  };
  const login = (tenantId: string, phone: string, pin: string, ip: string) =>
    h.post('/customers/auth/login', { tenantId, phone, pin }, { 'x-client-ip': ip });
  const throttled = (r: Res, retryAfterS: number) => {
    assert.equal(r.status, 429, r.text);
    assert.equal(r.json.code, 'ADDRESS_THROTTLED');
    assert.equal(r.headers['retry-after'], String(retryAfterS));
  };

  it('20 failures across phones from 127.0.0.1 leave other customers able to log in from it; the default threshold is 100', async () => {
    await h.onboard('ta', '+254700100001', '482915');
    await failMany('ta', '127.0.0.1', 20);
    assert.equal((await login('ta', '+254700100001', '482915', '127.0.0.1')).status, 200);
    assert.equal(
      (await login('ta', '+254700100001', '482915', '::ffff:127.0.0.1')).status,
      200,
      'IPv4-mapped IPv6 is the same address',
    );
    await failMany('ta', '::ffff:127.0.0.1', 79);
    assert.equal(
      (await login('ta', '+254700100001', '482915', '127.0.0.1')).status,
      200,
      '99 failures: still below the threshold',
    );
    await failMany('ta', '127.0.0.1', 1);
    throttled(await login('ta', '+254700100001', '482915', '127.0.0.1'), 60);
    throttled(await fail('ta', '127.0.0.1'), 60);
    assert.equal(
      (await login('ta', '+254700100001', '482915', freshIp())).status,
      200,
      'only that address is slowed down',
    );
  });

  it('past the threshold the address is delayed progressively longer (tenant setting), per IPv6 /64', async () => {
    const phone = '+254700100002';
    await h.onboard('tlow', phone, '502938');
    const inPrefix = () => `2001:db8:77:1:${(++seq).toString(16)}::1`;
    await failMany('tlow', inPrefix, 19);
    assert.equal(
      (await login('tlow', phone, '502938', '2001:db8:77:1:ffff::9')).status,
      200,
      'below the tenant threshold of 20',
    );
    await failMany('tlow', inPrefix, 1);
    throttled(await login('tlow', phone, '502938', '2001:db8:77:1:abcd::1'), 30);
    assert.equal(
      (await login('tlow', phone, '502938', '2001:db8:77:2::1')).status,
      200,
      'another /64 is another subscriber',
    );
    const retries: string[] = [];
    for (const waitS of [30, 60, 120, 120]) {
      h.clock.t += waitS * 1000;
      assert.equal((await fail('tlow', inPrefix())).status, 401, 'admitted once the delay has passed');
      const r = await login('tlow', phone, '502938', inPrefix());
      assert.equal(r.json.code, 'ADDRESS_THROTTLED');
      retries.push(r.headers['retry-after'] ?? '');
    }
    assert.deepEqual(retries, ['60', '120', '120', '120'], 'doubling up to max_delay_minutes (2)');
    const { rows } = await h.tdb.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM audit_log WHERE tenant_id = 'tlow' AND action = 'auth.login' AND attrs->>'outcome' = 'throttled'`,
    );
    assert.equal(rows[0]?.n, 5, 'every refusal is audited');
  });

  it('a malformed address_throttle setting reads as the defaults, not as a lower threshold', async () => {
    const ip = freshIp();
    await h.onboard('tbad', '+254700100003', '615243');
    await failMany('tbad', ip, 10);
    assert.equal((await login('tbad', '+254700100003', '615243', ip)).status, 200);
  });

  it("one tenant's failures do not count against another tenant's address counter", async () => {
    const ip = freshIp();
    await h.onboard('tlow', '+254700100004', '720394');
    await h.onboard('tlow2', '+254700100004', '720394');
    await failMany('tlow', ip, 15);
    await failMany('tlow2', ip, 15);
    assert.equal((await login('tlow', '+254700100004', '720394', ip)).status, 200);
    assert.equal((await login('tlow2', '+254700100004', '720394', ip)).status, 200);
    await failMany('tlow', ip, 5);
    throttled(await login('tlow', '+254700100004', '720394', ip), 30);
    assert.equal((await login('tlow2', '+254700100004', '720394', ip)).status, 200);
  });

  it('the per-phone lockout is unchanged: 5 failures lock the phone from every address', async () => {
    const phone = '+254700100005';
    await h.onboard('ta', phone, '830516');
    for (let i = 0; i < 5; i++) assert.equal((await login('ta', phone, '111000', freshIp())).status, 401);
    const r = await login('ta', phone, '830516', freshIp());
    assert.equal(r.status, 429);
    assert.equal(r.json.code, 'LOCKED');
    assert.equal(r.headers['retry-after'], String(15 * 60));
  });

  it('the per-device lockout is unchanged: 5 failures from one device lock it across phones and addresses', async () => {
    const phone = '+254700100006';
    await h.onboard('ta', phone, '940627');
    const device = { 'x-device-id': 'dev-shared-1' };
    for (let i = 0; i < 5; i++) {
      seq++;
      const r = await h.post(
        '/customers/auth/login',
        { tenantId: 'ta', phone: `+2547310${String(seq).padStart(5, '0')}`, pin: '4711' },
        { ...device, 'x-client-ip': freshIp() },
      );
      assert.equal(r.status, 401);
    }
    const r = await h.post(
      '/customers/auth/login',
      { tenantId: 'ta', phone, pin: '940627' },
      { ...device, 'x-client-ip': freshIp() },
    );
    assert.equal(r.status, 429);
    assert.equal(r.json.code, 'LOCKED');
    assert.equal(
      (await login('ta', phone, '940627', freshIp())).status,
      200,
      'the same customer on another device',
    );
  });
});
