/**
 * The key-set cache through the edge's gRPC Check (the production decider over a test database):
 * tokens naming a key id the tenant's cached set lacks (forged, retired) re-read the set at most
 * once a second and share that read with every token arriving meanwhile, and a re-read that fails
 * leaves the cached set serving good tokens.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SignJWT } from 'jose';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { issuerFor, TokenVerifier, unknownKidReloadMs } from '../../shared/token-keys.ts';
import { startBundleEdge, type BundleEdge } from '../helpers/bundle-edge.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { envoyRequest } from '../helpers/edge.ts';

const tenant = 'kidflood';

/** `db` with its reads of the tenant's signing keys counted, held while `gate.held`, failed while `gate.down`. */
function keyReads(db: Db, gate: { reads: number; held?: Promise<void>; down: boolean }): Db {
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (prop !== 'query') return Reflect.get(target, prop, receiver);
      return async (sql: string, params?: unknown[]) => {
        if (!/\bsigning_keys\b/.test(sql) || params?.[0] !== tenant) return target.query(sql, params);
        gate.reads++;
        await gate.held;
        if (gate.down) throw new Error('timeout exceeded when trying to connect');
        return target.query(sql, params);
      };
    },
  });
}

describe('the key-set cache through the edge', () => {
  const gate: { reads: number; held?: Promise<void>; down: boolean } = { reads: 0, down: false };
  const clock = { skewMs: 0 };
  let c: TestCore;
  let running: BundleEdge | undefined;
  let good: string;
  let forged: string;

  before(async () => {
    c = await startTestCore();
    const db = c.tdb.db;
    await db.query("INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')", [
      tenant,
    ]);
    const id = randomUUID();
    const sid = randomUUID();
    await db.query(
      'INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, $2, $3, now())',
      [id, tenant, '+254700111333'],
    );
    await db.query(
      `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, created_at, last_seen)
       VALUES ($1, $2, 'customer', $3, 'j', 1, now(), now())`,
      [sid, tenant, id],
    );
    await db.query(
      `INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
       VALUES ($1, 'customer', $2, 'member', 'tenant', $1)`,
      [tenant, id],
    );
    const claims = { sub: id, sid, aal: 1, amr: ['pin'], jti: randomUUID(), aud: 'payments-api' };
    good = await c.keys.sign(tenant, claims, { expiresInS: 600, typ: 'at+jwt' });
    forged = await new SignJWT({ ...claims, tid: tenant })
      .setProtectedHeader({ alg: 'EdDSA', kid: `${tenant}-ffffffffffffffff`, typ: 'at+jwt' })
      .setIssuer(issuerFor(tenant))
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(generateKeyPairSync('ed25519').privateKey);
    running = await startBundleEdge(db, c.keys, {
      log: createLogger('silent'),
      edgeSecret: 'key-cache-edge-secret',
      verifier: new TokenVerifier(keyReads(db, gate), { now: () => Date.now() + clock.skewMs }),
    });
  });
  after(async () => {
    await running?.stop();
    await c?.close();
  });

  /** The Check's answer to a request bearing `token`: 0 allowed, else the denial's HTTP status. */
  const check = async (token: string, ip: string): Promise<number> => {
    const headers = { authorization: `Bearer ${token}` };
    const res = await running!.edge.check(envoyRequest('GET', '/customers/sessions', { headers, ip }));
    return res.denied_response?.status?.code ?? res.status.code;
  };

  it('forged key ids: one re-read a second, shared by the tokens arriving meanwhile', async () => {
    assert.equal(await check(good, '198.51.100.1'), 0);
    const base = gate.reads;
    clock.skewMs += unknownKidReloadMs;
    let release!: () => void;
    gate.held = new Promise<void>((r) => (release = r));
    const first = check(forged, '198.51.100.2');
    while (gate.reads === base) await new Promise((r) => setTimeout(r, 1));
    const during = [
      ...Array.from({ length: 10 }, (_, i) => check(forged, `198.51.100.${10 + i}`)),
      ...Array.from({ length: 10 }, (_, i) => check(good, `198.51.100.${30 + i}`)),
    ];
    await new Promise((r) => setTimeout(r, 50));
    release();
    gate.held = undefined;
    const answers = await Promise.all([first, ...during]);
    assert.deepEqual(answers, [401, ...Array(10).fill(401), ...Array(10).fill(0)]);
    assert.equal(gate.reads - base, 1, 'the key set was read once');
    // Within the second: forged key ids are answered from the cached set.
    for (let i = 0; i < 5; i++) assert.equal(await check(forged, '198.51.100.3'), 401);
    assert.equal(gate.reads - base, 1);
  });

  it('a re-read that fails: the forged token is 503, good tokens pass from the cached set', async () => {
    clock.skewMs += unknownKidReloadMs;
    const base = gate.reads;
    gate.down = true;
    try {
      assert.equal(await check(forged, '198.51.100.4'), 503);
      assert.equal(await check(good, '198.51.100.5'), 0, 'the cached set still serves good tokens');
      assert.equal(await check(forged, '198.51.100.4'), 401);
      assert.equal(gate.reads - base, 1);
    } finally {
      gate.down = false;
    }
  });
});
