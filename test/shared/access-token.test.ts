/**
 * Issue 21 item 2: one bearer-token verifier (shared/access-token.ts) with one code per refusal.
 * Each refusal of its table is sent to the edge (a real ext_authz gRPC service with the policy
 * bundle) and, the same request, straight to core (which checks the token again), and both must
 * answer the table's code.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { KeyStore } from '../../core/keys/keys.ts';
import type { CheckResponse } from '../../edge/types.ts';
import { createLogger } from '../../shared/log.ts';
import { tokenKinds } from '../../shared/access-token.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { startBundleEdge, type BundleEdge } from '../helpers/bundle-edge.ts';
import { envoyRequest, type TestEdge } from '../helpers/edge.ts';
import { call } from '../helpers/http.ts';
import { respellings } from '../helpers/respell.ts';

const log = createLogger('silent');
const tenant = 'tok';

describe('one bearer-token verifier: the same code per refusal at the edge and at core', () => {
  let c: TestCore;
  let running: BundleEdge;
  let edge: TestEdge;

  /** A customer with a session of `subjectType` (revoked when asked). */
  const person = async (opts: { subjectType?: string; revoked?: boolean } = {}) => {
    const id = randomUUID();
    const sid = randomUUID();
    await c.tdb.db.query(
      'INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, $2, $3, now())',
      [id, tenant, `+2547${String(Math.floor(Math.random() * 1e8)).padStart(8, '0')}`],
    );
    await c.tdb.db.query(
      `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, created_at, last_seen, revoked_at)
       VALUES ($1, $2, $3, $4, 'j', 1, now(), now(), CASE WHEN $5 THEN now() END)`,
      [sid, tenant, opts.subjectType ?? 'customer', id, opts.revoked === true],
    );
    return { id, sid };
  };
  const sign = (
    who: { id: string; sid: string },
    opts: { aud?: string; typ?: string; keys?: KeyStore; extra?: Record<string, unknown> } = {},
  ) =>
    (opts.keys ?? c.keys).sign(
      tenant,
      {
        sub: who.id,
        sid: who.sid,
        aal: 1,
        amr: ['pin'],
        jti: randomUUID(),
        aud: opts.aud ?? 'payments-api',
        ...opts.extra,
      },
      { expiresInS: 600, typ: opts.typ ?? 'at+jwt' },
    );

  /** The code the edge answers and the code core answers for one request. */
  const codes = async (method: string, path: string, authorization?: string) => {
    const headers: Record<string, string> = authorization ? { authorization } : {};
    const res: CheckResponse = await edge.check(envoyRequest(method, path, { headers }));
    assert.equal(res.status.code !== 0, true, `the edge refuses ${method} ${path}`);
    const atEdge = JSON.parse(res.denied_response?.body ?? '{}') as { code?: string };
    const atCore = await call(c.origin, method, path, { headers: { ...headers, 'x-request-id': 'r1' } });
    return { edge: atEdge.code, core: (atCore.json as { code?: string }).code };
  };
  const expect = async (method: string, path: string, authorization: string | undefined, code: string) => {
    const got = await codes(method, path, authorization);
    assert.deepEqual({ edge: got.edge, core: got.core }, { edge: code, core: code });
  };

  before(async () => {
    c = await startTestCore();
    await c.tdb.db.query(
      "INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')",
      [tenant],
    );
    running = await startBundleEdge(c.tdb.db, c.keys, { log, edgeSecret: 'token-test-edge-secret' });
    edge = running.edge;
  });
  after(async () => {
    await running.stop();
    await c.close();
  });

  it('a customer route: missing, malformed, bad signature, expired, wrong audience or typ, revoked', async () => {
    const p = await person();
    const good = await sign(p);
    const ok = await call(c.origin, 'GET', '/customers/sessions', {
      headers: { authorization: `Bearer ${good}`, 'x-request-id': 'r0' },
    });
    assert.equal(ok.status, 200, `the valid token passes core (a refusal is told from none): ${ok.text}`);
    await expect('GET', '/customers/sessions', undefined, 'UNAUTHENTICATED');
    await expect('GET', '/customers/sessions', 'Bearer not-a-jwt', 'invalid_token');
    const [h, b, s] = good.split('.') as [string, string, string];
    const flipped = `${s.slice(0, -2)}${s.endsWith('AA') ? 'BB' : 'AA'}`;
    await expect('GET', '/customers/sessions', `Bearer ${h}.${b}.${flipped}`, 'invalid_token');
    // Signed an hour ago for ten minutes: expired.
    const past = new KeyStore(c.tdb.db, c.master, { now: () => Date.now() - 3_600_000 });
    await expect('GET', '/customers/sessions', `Bearer ${await sign(p, { keys: past })}`, 'invalid_token');
    await expect('GET', '/customers/sessions', `Bearer ${await sign(p, { aud: 'staff' })}`, 'invalid_token');
    await expect('GET', '/customers/sessions', `Bearer ${await sign(p, { typ: 'JWT' })}`, 'invalid_token');
    const gone = await person({ revoked: true });
    await expect('GET', '/customers/sessions', `Bearer ${await sign(gone)}`, 'session_revoked');
    const agentSession = await person({ subjectType: 'agent' });
    await expect('GET', '/customers/sessions', `Bearer ${await sign(agentSession)}`, 'session_revoked');
  });

  it('a second spelling of a valid token (padding, spare bits in its signature) is invalid_token at the edge and at core', async () => {
    const p = await person();
    const good = await sign(p);
    // The token itself is verified first by both (and so cached as verified): the edge answers
    // its session rule or the policy (this person has no tuples), core serves it.
    const atEdge = await edge.check(
      envoyRequest('GET', '/customers/sessions', { headers: { authorization: `Bearer ${good}` } }),
    );
    assert.notEqual(JSON.parse(atEdge.denied_response?.body ?? '{}').code, 'invalid_token');
    const ok = await call(c.origin, 'GET', '/customers/sessions', {
      headers: { authorization: `Bearer ${good}`, 'x-request-id': 'r0' },
    });
    assert.equal(ok.status, 200, ok.text);
    for (const [name, other] of respellings(good)) {
      const got = await codes('GET', '/customers/sessions', `Bearer ${other}`);
      assert.deepEqual(got, { edge: 'invalid_token', core: 'invalid_token' }, name);
    }
  });

  it('a token stepped up by a removed device: device_revoked', async () => {
    const p = await person();
    const device = randomUUID();
    await c.tdb.db.query(
      `INSERT INTO customer_devices (id, tenant_id, customer_id, public_key, created_at, usable_from, revoked_at)
       VALUES ($1, $2, $3, $4, now(), now(), now())`,
      [device, tenant, p.id, Buffer.alloc(32, 7)],
    );
    const token = await sign(p, { extra: { dvc: device } });
    await expect('GET', '/customers/sessions', `Bearer ${token}`, 'device_revoked');
  });

  it('an agent route and a core-client route answer the same codes', async () => {
    await expect('GET', '/v1/agent/me', undefined, 'UNAUTHENTICATED');
    await expect('GET', '/v1/agent/me', 'Bearer not-a-jwt', 'invalid_token');
    // A customer's session is no agent session.
    const p = await person();
    await expect('GET', '/v1/agent/me', `Bearer ${await sign(p)}`, 'session_revoked');
    const account = `/v1/core/accounts/${randomUUID()}`;
    await expect('GET', account, undefined, 'UNAUTHENTICATED');
    // A customer token is not a core client's (audience).
    await expect('GET', account, `Bearer ${await sign(p)}`, 'invalid_token');
  });

  it("a revoked OAuth client's token: invalid_token at the edge and at core", async () => {
    await c.tdb.db.query(
      `INSERT INTO oauth_clients (tenant_id, client_id, secret_hash, scopes) VALUES ($1, 'client-revoked', '\\x00', '{core:read}')`,
      [tenant],
    );
    const token = await c.keys.sign(
      tenant,
      { sub: 'client-revoked', aud: 'core', scope: 'core:read', jti: randomUUID() },
      { expiresInS: 300, typ: 'at+jwt' },
    );
    const account = `/v1/core/accounts/${randomUUID()}`;
    // Live: past authentication at core (the account does not exist).
    const live = await call(c.origin, 'GET', account, {
      headers: { authorization: `Bearer ${token}`, 'x-request-id': 'r2' },
    });
    assert.equal(live.status, 404, live.text);
    await c.tdb.db.query(`UPDATE oauth_clients SET revoked_at = now() WHERE client_id = 'client-revoked'`);
    // The edge learns of the revocation by notification: wait (bounded) until it refuses.
    const refused = async () =>
      (await edge.check(envoyRequest('GET', account, { headers: { authorization: `Bearer ${token}` } })))
        .status.code !== 0;
    for (let i = 0; i < 100 && !(await refused()); i++) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(await codes('GET', account, `Bearer ${token}`), {
      edge: 'invalid_token',
      core: 'invalid_token',
    });
  });

  it('every kind of token must carry its expiry (the signature library checks exp only when present)', () => {
    const client = { sub: 'c1', tid: tenant, iat: 1, scope: 'core:read' };
    assert.equal(tokenKinds.client.check.Check({ ...client, exp: 2 }), true);
    assert.equal(tokenKinds.client.check.Check(client), false);
    const session = { sub: 's', tid: tenant, sid: 's', jti: 'j', aal: 1, amr: ['pin'], iat: 1 };
    assert.equal(tokenKinds.customer.check.Check({ ...session, exp: 2 }), true);
    assert.equal(tokenKinds.customer.check.Check(session), false);
  });
});
