/**
 * A tenant's key set stays small however often it is rotated (shared/token-keys.ts
 * `graceKeysMax`): every verifier (each edge and core) parses every key of a set at each read and
 * re-reads it at every rotation's NOTIFY and for forged key ids, so a tenant's Admin rotating in a
 * loop with 24 h of grace must not grow it for every tenant sharing those processes. A rotation
 * retires the grace keys beyond the newest ones, and its audit record names them; a set read
 * from a table that already holds more (written before the bound) is read bounded too.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeProtectedHeader } from 'jose';
import { graceKeysMax } from '../../core/keys/keys.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { staffViaEdge } from '../helpers/edge-auth.ts';
import { call } from '../helpers/http.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';

const tenantId = 'gb';
const rotations = graceKeysMax + 3;

describe("a tenant's key set is bounded however often it is rotated", () => {
  let c: TestCore;

  before(async () => {
    c = await startTestCore();
    for (const id of [tenantId, 'gc'])
      await c.tdb.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
        [id],
      );
  });
  after(() => c.close());

  const sign = (tenant: string) => c.keys.sign(tenant, { sub: 'u', aud: 'api' }, { expiresInS: 600 });
  const accepted = (v: TokenVerifier, token: string) =>
    v.verify(token, { audience: 'api' }).then(
      () => true,
      () => false,
    );

  it('a rotation retires grace keys beyond the newest graceKeysMax, and its audit record names them', async () => {
    // One token of each key, signed while it was active.
    const signed: { kid: string; token: string }[] = [];
    for (let i = 0; i < rotations; i++) {
      const token = await sign(tenantId);
      signed.push({ kid: decodeProtectedHeader(token).kid as string, token });
      const r = await call(c.origin, 'POST', '/v1/admin/rotate-keys', {
        json: { graceSeconds: 86_400 },
        headers: staffViaEdge('admin', tenantId, { 'idempotency-key': randomUUID() }),
      });
      assert.equal(r.status, 200, r.text);
    }
    const { rows } = await c.tdb.db.query<{ kid: string }>(
      `SELECT kid FROM signing_keys WHERE tenant_id = $1 AND state = 'grace' ORDER BY created_at`,
      [tenantId],
    );
    const kept = signed.slice(-graceKeysMax);
    const cut = signed.slice(0, rotations - graceKeysMax);
    assert.deepEqual(
      rows.map((r) => r.kid),
      kept.map((s) => s.kid),
      'the newest previous keys stay in grace',
    );

    // A verifier that never cached the set (another process): the newest grace keys' tokens only.
    const edge = new TokenVerifier(c.tdb.db);
    assert.equal((await edge.verificationKeys(tenantId)).length, graceKeysMax + 1);
    for (const s of kept) assert.ok(await accepted(edge, s.token), `a token of ${s.kid} verifies`);
    for (const s of cut) assert.ok(!(await accepted(edge, s.token)), `a token of ${s.kid} is refused`);
    assert.ok(await accepted(edge, await sign(tenantId)), 'the active key signs tokens that verify');
    assert.equal((await c.keys.jwks(tenantId)).keys.length, graceKeysMax + 1);

    const audit = await c.tdb.db.query<{ actor: { id: string }; attrs: { retired?: string[] } }>(
      `SELECT actor, attrs FROM audit_log WHERE tenant_id = $1 AND action = 'keys.rotate' ORDER BY id`,
      [tenantId],
    );
    assert.equal(audit.rows.length, rotations);
    assert.ok(audit.rows.every((r) => r.actor.id === 'staff-admin'));
    assert.deepEqual(
      audit.rows.map((r) => r.attrs.retired ?? []),
      signed.map((_, i) => (i >= graceKeysMax ? [signed[i - graceKeysMax]?.kid] : [])),
      'each rotation past the bound names the key it retired early',
    );
  });

  it('reads a set bounded from a table that holds more keys in grace, the newest and the active key first', async () => {
    const active = await sign('gc');
    const { publicKey } = generateKeyPairSync('ed25519');
    const jwk = publicKey.export({ format: 'jwk' });
    // Grace keys written before rotations retired the older ones: a thousand of them.
    await c.tdb.db.query(
      `INSERT INTO signing_keys (kid, tenant_id, public_jwk, private_enc, state, grace_until, created_at)
       SELECT 'gc-old-' || g, 'gc', $1::jsonb || jsonb_build_object('kid', 'gc-old-' || g), '\\x00', 'grace',
              now() + interval '1 day', now() - interval '1 hour' + g * interval '1 ms'
         FROM generate_series(1, 1000) g`,
      [JSON.stringify(jwk)],
    );
    const edge = new TokenVerifier(c.tdb.db);
    const kids = (await edge.verificationKeys('gc')).map((k) => k.kid);
    assert.equal(kids.length, graceKeysMax + 1);
    assert.equal(kids[0], decodeProtectedHeader(active).kid, 'the active key is in the set');
    assert.deepEqual(
      kids.slice(1),
      Array.from({ length: graceKeysMax }, (_, i) => `gc-old-${1000 - i}`),
      'with the newest grace keys',
    );
    assert.ok(await accepted(edge, active));
    assert.equal((await c.keys.jwks('gc')).keys.length, graceKeysMax + 1);
  });
});
