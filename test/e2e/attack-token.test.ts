/**
 * Attacks on the one bearer-token verifier (shared/access-token.ts, issue 21 item 2) from
 * outside, through the dev gateway, and on the caches it and the edge keep: each case is a hole
 * found by trying it, kept so it stays closed, or a probe of the refusal table.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { KeyStore } from '../../core/keys/keys.ts';
import { issueAccessToken } from '../../core/identity/tokens.ts';
import type { Db } from '../../shared/db/pool.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { callRetrying, signUpCustomer } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';
import { addStaff, addTenant, signIn, stackKeys } from '../staff/fixtures.ts';

const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString('base64url');

/** A compact JWS with the given header and claims and a signature of random bytes (forged). */
function forged(header: Record<string, unknown>, claims: Record<string, unknown>): string {
  return `${b64(header)}.${b64(claims)}.${randomBytes(64).toString('base64url')}`;
}

const nowS = (): number => Math.floor(Date.now() / 1000);

describe('attacks on the bearer-token verifier', () => {
  let s: E2eStack;
  let keys: KeyStore;
  let customerToken: string;
  let demoKid: string;

  const get = (path: string, authorization: string, origin = s.gw): Promise<Res> =>
    callRetrying(origin, 'GET', path, { headers: { authorization, 'x-request-id': randomUUID() } });

  /** The refusal the table names for it: status, code, and nothing of the token echoed. */
  function refusedAs(r: Res, status: number, code: string, token: string): void {
    assert.equal(r.status, status, r.text);
    assert.equal(r.json?.code, code, r.text);
    // Its last non-empty part (an unsigned token has no signature): in no body or header.
    const part = token.split('.').filter(Boolean).at(-1) ?? token;
    assert.ok(!r.text.includes(part), 'the answer does not echo the token');
    assert.ok(!Object.values(r.headers).some((v) => v.includes(part)), 'nor do its headers');
  }

  /** The same refusal from the edge (through the gateway) and from core's own re-check. */
  async function bothRefuse(path: string, authorization: string, code: string, token: string): Promise<void> {
    refusedAs(await get(path, authorization), 401, code, token);
    refusedAs(await get(path, authorization, s.core), 401, code, token);
  }

  before(async () => {
    s = await startE2eStack('attack-token');
    keys = await stackKeys(s.tdb.db, s.dataDir);
    ({ accessToken: customerToken } = await signUpCustomer(
      s.gw,
      s.dataDir,
      '+254700021002',
      '482913',
      'attack-token-phone',
    ));
    const { rows } = await s.tdb.db.query<{ kid: string }>(
      "SELECT kid FROM signing_keys WHERE tenant_id = 'demo' AND state = 'active'",
    );
    demoKid = rows[0]?.kid as string;
  });
  after(async () => {
    await s?.stop();
  });

  it('authenticates a customer with its own token, `bearer` in any case (the control)', async () => {
    // Past authentication the policy may still ask a new device for a step-up (403): not a 401.
    const r = await get('/v1/transactions', `bearer ${customerToken}`);
    assert.ok(r.status === 200 || r.json?.code === 'MFA_REQUIRED', r.text);
  });

  it('refuses alg none, an unknown kid and a tenant id no tenant can have as invalid_token', async () => {
    const claims = {
      sub: randomUUID(),
      tid: 'demo',
      sid: randomUUID(),
      jti: randomUUID(),
      aal: 2,
      amr: ['pin'],
      aud: 'payments-api',
      iss: 'urn:payments:tenant:demo',
      iat: nowS(),
      exp: nowS() + 600,
    };
    const none = `${b64({ alg: 'none', kid: demoKid, typ: 'at+jwt' })}.${b64(claims)}.`;
    await bothRefuse('/v1/transactions', `Bearer ${none}`, 'invalid_token', none);
    const unknownKid = forged({ alg: 'EdDSA', kid: '../../etc/passwd', typ: 'at+jwt' }, claims);
    await bothRefuse('/v1/transactions', `Bearer ${unknownKid}`, 'invalid_token', unknownKid);
    const oddTenant = forged(
      { alg: 'EdDSA', kid: demoKid, typ: 'at+jwt' },
      { ...claims, tid: 'X'.repeat(4000) },
    );
    await bothRefuse('/v1/transactions', `Bearer ${oddTenant}`, 'invalid_token', oddTenant);
  });

  it('refuses a staff token on a customer route and a customer token on a staff route', async () => {
    const staffId = await addStaff(s.tdb.db, 'demo', 'attack-token-staff@demo.example', ['admin']);
    const staff = await signIn(s.tdb.db, keys, 'demo', staffId);
    await bothRefuse('/v1/transactions', `Bearer ${staff.accessToken}`, 'invalid_token', staff.accessToken);
    const onStaff = await get('/v1/countries', `Bearer ${customerToken}`);
    refusedAs(onStaff, 401, 'invalid_token', customerToken);
  });

  it('refuses two tokens in one header as no token (UNAUTHENTICATED), not as the first', async () => {
    await bothRefuse(
      '/v1/transactions',
      `Bearer ${customerToken} ${customerToken}`,
      'UNAUTHENTICATED',
      customerToken,
    );
  });

  // Hole: the unverified `tid` of any token chose a key set, looked up and cached for every
  // distinct value: a flood of forged tokens (no credential guard on customer routes) cost a
  // query each and grew the verifier's cache without bound, values of kilobytes included.
  it('looks no key set up for a tenant id no tenant can have, and keeps a bounded cache of key sets', async () => {
    let queries = 0;
    const stub = {
      query: async () => {
        queries++;
        return { rows: [] };
      },
    } as unknown as Db;
    const keySetsMax = 50;
    const verifier = new TokenVerifier(stub, { keySetsMax });
    const token = (tid: string) =>
      forged({ alg: 'EdDSA', kid: 'k1', typ: 'at+jwt' }, { tid, aud: 'payments-api' });
    for (const tid of ['X'.repeat(4000), '../demo', 'Demo', 'de mo', ''])
      await assert.rejects(verifier.verify(token(tid), { audience: 'payments-api' }), { code: 'BAD_TOKEN' });
    assert.equal(queries, 0, 'no lookup for a tenant id no tenant can have');

    for (let i = 0; i <= keySetsMax; i++)
      await assert.rejects(verifier.verify(token(`t-${i}`), { audience: 'payments-api' }), {
        code: 'UNKNOWN_KID',
      });
    assert.equal(queries, keySetsMax + 1);
    // The newest is still cached; the oldest was dropped to keep the bound, so it is read again.
    await assert.rejects(verifier.verify(token(`t-${keySetsMax}`), { audience: 'payments-api' }));
    assert.equal(queries, keySetsMax + 1);
    await assert.rejects(verifier.verify(token('t-0'), { audience: 'payments-api' }));
    assert.equal(queries, keySetsMax + 2);
  });

  // Hole: the edge cached sessions, devices and staff members by id alone while reading them by
  // tenant and id, so a customer of another tenant naming a victim's device id in
  // `x-intent-device-id` cached "no such device" under that id, and the victim's removed device
  // then passed the edge (issue 13 item 1) until the entry expired.
  it("a customer of another tenant naming a victim's removed device does not make the edge forget it was removed", async () => {
    const victim = JSON.parse(Buffer.from(customerToken.split('.')[1] as string, 'base64url').toString()) as {
      sub: string;
    };
    const deviceId = randomUUID();
    await s.tdb.db.query(
      `INSERT INTO customer_devices (id, tenant_id, customer_id, public_key, created_at, usable_from, revoked_at)
       VALUES ($1, 'demo', $2, $3, now(), now(), now())`,
      [deviceId, victim.sub, randomBytes(32)],
    );
    // The attacker: a signed-in customer of another tenant.
    await addTenant(s.tdb.db, 'attack-other');
    const sid = randomUUID();
    const sub = randomUUID();
    await s.tdb.db.query(
      `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, created_at, last_seen)
       VALUES ($1, 'attack-other', 'customer', $2, 'j', 1, now(), now())`,
      [sid, sub],
    );
    const { token } = await issueAccessToken(
      keys,
      { tenantId: 'attack-other', sub, sid, aal: 1, amr: ['pin'] },
      Date.now(),
    );
    const intent = (authorization: string) =>
      callRetrying(s.gw, 'GET', '/v1/transactions', {
        headers: { authorization, 'x-intent-device-id': deviceId, 'x-request-id': randomUUID() },
      });
    const poison = await intent(`Bearer ${token}`);
    assert.ok(poison.status !== 500 && poison.json?.code !== 'device_revoked', poison.text);
    const own = await intent(`Bearer ${customerToken}`);
    assert.equal(own.status, 403, own.text);
    assert.equal(own.json?.code, 'device_revoked', own.text);
  });
});
