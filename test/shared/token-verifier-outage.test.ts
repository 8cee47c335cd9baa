/**
 * A key set that cannot be read is the service's failure, not the token's: the one verifier
 * (shared/access-token.ts) refuses a token as `invalid_token` only for the token's own faults
 * (form, key id, signature, claims). A database that does not answer while the key set is
 * (re)loaded — after the edge's listener reconnects every cache is dropped — must not tell a
 * client holding a good token to throw it away: the edge fails closed (503 authz_unavailable)
 * and core answers 503 when its pool is exhausted.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SignJWT } from 'jose';
import { verifiedToken } from '../../core/http/access-token.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { TokenRefusal, verifyAccessToken } from '../../shared/access-token.ts';
import type { Db } from '../../shared/db/pool.ts';
import { asAppError } from '../../shared/errors.ts';
import { createLogger } from '../../shared/log.ts';
import { issuerFor, TokenVerifier } from '../../shared/token-keys.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { startBundleEdge, type BundleEdge } from '../helpers/bundle-edge.ts';
import { envoyRequest, type TestEdge } from '../helpers/edge.ts';

const log = createLogger('silent');

/** What pg-pool throws when no connection frees up within connectionTimeoutMillis. */
const poolTimeout = () => new Error('timeout exceeded when trying to connect');

/** `db`, except that reading signing keys fails while `down.keys` is set. */
function keysOutage(db: Db, down: { keys: boolean }): Db {
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop !== 'query') return Reflect.get(target, prop, receiver);
      return (sql: string, params?: unknown[]) =>
        down.keys && /\bsigning_keys\b/.test(sql) ? Promise.reject(poolTimeout()) : target.query(sql, params);
    },
  });
}

describe('the token verifier when the key set cannot be read', () => {
  it('passes the failure on instead of refusing the token; refuses a token of an unknown key', async () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const token = await new SignJWT({
      tid: 'demo',
      sub: randomUUID(),
      sid: randomUUID(),
      aal: 1,
      amr: ['pin'],
    })
      .setProtectedHeader({ alg: 'EdDSA', kid: 'demo-0011223344556677', typ: 'at+jwt' })
      .setIssuer(issuerFor('demo'))
      .setAudience('payments-api')
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(privateKey);
    const failure = poolTimeout();
    const away = { query: () => Promise.reject(failure) } as unknown as Db;
    await assert.rejects(
      verifyAccessToken(new TokenVerifier(away), `Bearer ${token}`, 'customer', Date.now()),
      (err) => err === failure,
    );
    const empty = { query: () => Promise.resolve({ rows: [] }) } as unknown as Db;
    await assert.rejects(
      verifyAccessToken(new TokenVerifier(empty), `Bearer ${token}`, 'customer', Date.now()),
      (err) => err instanceof TokenRefusal && err.code === 'invalid_token',
    );
  });

  it('every malformed or forged token is a refusal while the key set reads, never a thrown failure', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const kid = 'demo-0011223344556677';
    const row = { kid, public_jwk: publicKey.export({ format: 'jwk' }), state: 'active', grace_until: null };
    const verifier = new TokenVerifier({ query: () => Promise.resolve({ rows: [row] }) } as unknown as Db);
    const good = await new SignJWT({
      tid: 'demo',
      sub: randomUUID(),
      sid: randomUUID(),
      aal: 1,
      amr: ['pin'],
    })
      .setProtectedHeader({ alg: 'EdDSA', kid, typ: 'at+jwt' })
      .setIssuer(issuerFor('demo'))
      .setAudience('payments-api')
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(privateKey);
    const [, payload, signature] = good.split('.') as [string, string, string];
    const part = (v: unknown) =>
      Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
    const headers: unknown[] = [
      { alg: 'EdDSA', kid, typ: 'at+jwt', crit: ['b64'], b64: false },
      { alg: 'EdDSA', kid, typ: 'at+jwt', crit: ['x'] },
      { alg: 'EdDSA', kid, typ: 'at+jwt', crit: 'x' },
      { alg: 'Ed25519', kid, typ: 'at+jwt' },
      { alg: 'none', kid },
      { alg: 'HS256', kid, typ: 'at+jwt' },
      { alg: 5, kid },
      { kid },
      { alg: 'EdDSA', kid, typ: 5 },
      { alg: 'EdDSA', kid: [kid] },
      { alg: 'EdDSA', kid: { kid } },
      { alg: 'EdDSA', kid: 5 },
      [1],
      null,
      '{"alg":"EdDSA"',
    ];
    const payloads: unknown[] = [
      JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')),
      { tid: 5 },
      { tid: 'demo', exp: 'soon' },
      { tid: 'demo', aud: 5 },
      [1],
      'text',
    ];
    const signatures = [signature, '', 'AAAA', 'A'.repeat(87), '!!!!', `${signature}=`];
    const tokens = [
      ...headers.flatMap((h) => payloads.flatMap((p) => signatures.map((s) => `${part(h)}.${part(p)}.${s}`))),
      ...['', '.', '...', 'a.b', 'a.b.c.d', `${good}.`, `${good.slice(0, -2)}`, 'é.é.é'],
    ];
    for (const token of tokens) {
      await assert.rejects(
        verifyAccessToken(verifier, `Bearer ${token}`, 'customer', Date.now()),
        (err) => err instanceof TokenRefusal,
        token,
      );
    }
  });

  describe('through the edge and at core', () => {
    const tenant = 'keyout';
    const down = { keys: false };
    let c: TestCore;
    let running: BundleEdge | undefined;
    let state: EdgeState;
    let edge: TestEdge;

    before(async () => {
      c = await startTestCore();
      await c.tdb.db.query(
        "INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')",
        [tenant],
      );
      running = await startBundleEdge(c.tdb.db, c.keys, {
        log,
        edgeSecret: 'key-outage-edge-secret',
        verifier: new TokenVerifier(keysOutage(c.tdb.db, down)),
      });
      ({ state, edge } = running);
    });
    after(async () => {
      down.keys = false;
      await running?.stop();
      await c?.close();
    });

    it('a good token while the key set cannot be read: 503 at the edge (not 401), then 200 once it can', async () => {
      const id = randomUUID();
      const sid = randomUUID();
      await c.tdb.db.query(
        'INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, $2, $3, now())',
        [id, tenant, '+254700111222'],
      );
      await c.tdb.db.query(
        `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, created_at, last_seen)
         VALUES ($1, $2, 'customer', $3, 'j', 1, now(), now())`,
        [sid, tenant, id],
      );
      await c.tdb.db.query(
        `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
         VALUES ($1, 'customer', $2, 'member', 'tenant', $1)`,
        [tenant, id],
      );
      const token = await c.keys.sign(
        tenant,
        { sub: id, sid, aal: 1, amr: ['pin'], jti: randomUUID(), aud: 'payments-api' },
        { expiresInS: 600, typ: 'at+jwt' },
      );
      const request = () =>
        edge.check(
          envoyRequest('GET', '/customers/sessions', { headers: { authorization: `Bearer ${token}` } }),
        );

      // As after the listener reconnects: every cache dropped, the key set to be read again.
      state.invalidateAll();
      down.keys = true;
      const during = await request();
      const body = JSON.parse(during.denied_response?.body ?? '{}') as { code?: string };
      assert.equal(during.denied_response?.status?.code, 503, during.denied_response?.body);
      assert.equal(body.code, 'authz_unavailable');
      assert.equal(
        Object.keys(during.denied_response?.headers ?? {}).some(
          (h) => h.toLowerCase() === 'www-authenticate',
        ),
        false,
        'no invalid_token challenge for a token nobody judged',
      );

      down.keys = false;
      const afterwards = await request();
      assert.equal(
        afterwards.status.code,
        0,
        `the same token passes once the keys can be read: ${afterwards.denied_response?.body}`,
      );
    });

    it('core: a pool that cannot lend a connection for the key set is 503 with Retry-After, not invalid_token', async () => {
      const id = randomUUID();
      const token = await c.keys.sign(
        tenant,
        { sub: id, sid: randomUUID(), aal: 1, amr: ['pin'], jti: randomUUID(), aud: 'payments-api' },
        { expiresInS: 600, typ: 'at+jwt' },
      );
      const away = new KeyStore(keysOutage(c.tdb.db, { keys: true }), c.master);
      let thrown: unknown;
      try {
        await verifiedToken(
          away,
          {
            headers: { authorization: `Bearer ${token}` },
            identity: { tenantId: tenant, principalId: id } as never,
          },
          'customer',
          Date.now(),
        );
      } catch (err) {
        thrown = err;
      }
      const answered = asAppError(thrown);
      assert.equal(answered.code, 'SERVICE_UNAVAILABLE');
      assert.equal(answered.headers?.['retry-after'], '1');
    });
  });
});
