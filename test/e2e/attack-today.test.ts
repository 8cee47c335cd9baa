import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { TestDb } from '../helpers/db.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { tenantWithAdmin as createTenant } from '../helpers/tenants.ts';
import type { Res } from '../helpers/http.ts';
import { addStaff, signIn, stackKeys } from '../staff/fixtures.ts';
import type { Demo } from '../helpers/journey.ts';

/**
 * Attacks through the dev gateway on the day's changes: only the platform's administrators (the
 * operator tenant's Admins) release a tenant they suspended, and the tenant's security settings
 * (allowed IP ranges, DPoP required) hold on the staff routes core verifies itself, as at the edge.
 */
describe('attacks on platform administration and staff tokens', () => {
  let e2e: E2eStack;
  let tdb: TestDb;
  let gw: string;
  let platformAdmin: string;

  /** A request through the gateway with `token` (retried past an overloaded decision deadline). */
  const as = (token: string, method: string, path: string, json?: unknown) => {
    const headers = { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...key() };
    return callRetrying(gw, method, path, json === undefined ? { headers } : { json, headers });
  };
  const key = () => ({ 'idempotency-key': `k-${randomUUID()}` });
  /** A tenant the platform created, and a service token of its own Admin. */
  const tenantWithAdmin = (id: string): Promise<string> => createTenant(gw, platformAdmin, tdb.db, id);
  const status = async (id: string) =>
    (await tdb.db.query<{ status: string }>('SELECT status FROM tenants WHERE id = $1', [id])).rows[0]
      ?.status;
  const refusedWith = (r: Res, code: string, what: string) => {
    assert.ok(r.status >= 400 && r.status < 500, `${what}: ${r.status} ${r.text}`);
    assert.equal(r.json?.code, code, `${what}: ${r.text}`);
  };

  before(async () => {
    e2e = await startE2eStack('atktoday');
    ({ tdb, gw } = e2e);
    const demo = e2e.demo as Demo & { serviceTokens: Record<'admin', { token: string }> };
    platformAdmin = demo.serviceTokens.admin.token;
  });
  after(() => e2e?.stop());

  it('a tenant the platform suspended cannot activate itself; the platform can', async () => {
    const own = await tenantWithAdmin('atktoday-susp');
    const s = await as(platformAdmin, 'POST', '/v1/tenants/atktoday-susp:suspend');
    assert.equal(s.status, 200, s.text);
    const self = await as(own, 'POST', '/v1/tenants/atktoday-susp:activate');
    refusedWith(self, 'FORBIDDEN', "the suspended tenant's own Admin activating it");
    const patched = await as(own, 'PATCH', '/v1/tenants/atktoday-susp', { status: 'ACTIVE' });
    assert.equal(patched.status, 403, `nor by PATCH: ${patched.text}`);
    assert.equal(await status('atktoday-susp'), 'SUSPENDED');
    const read = await as(own, 'GET', '/v1/tenants/atktoday-susp');
    assert.equal(read.status, 200, `its staff still read the tenant: ${read.text}`);
    // Core's own staff routes: step-up stays (a suspended operator must reach AAL 2 to activate
    // itself), the sessions list and passkey management do not.
    const keys = await stackKeys(tdb.db, e2e.dataDir);
    const member = await addStaff(tdb.db, 'atktoday-susp', 'susp@atktoday.example', ['admin']);
    const t = await signIn(tdb.db, keys, 'atktoday-susp', member);
    for (const path of ['/auth/sessions', '/auth/passkeys'])
      refusedWith(await as(t.accessToken, 'GET', path), 'FORBIDDEN', `${path} in a suspended tenant`);
    const mfa = await as(t.accessToken, 'POST', '/auth/mfa/challenge', {
      method: 'DELETE',
      path: '/v1/sessions/x',
    });
    assert.notEqual(mfa.status, 403, `step-up stays: ${mfa.text}`);
    const a = await as(platformAdmin, 'POST', '/v1/tenants/atktoday-susp:activate');
    assert.equal(a.status, 200, a.text);
    assert.equal(await status('atktoday-susp'), 'ACTIVE');
  });

  it("a staff token from outside its tenant's allowed IP ranges is refused on the routes core checks itself too", async () => {
    await tenantWithAdmin('atktoday-ip');
    const keys = await stackKeys(tdb.db, e2e.dataDir);
    const member = await addStaff(tdb.db, 'atktoday-ip', 'ip@atktoday.example', ['admin']);
    const t = await signIn(tdb.db, keys, 'atktoday-ip', member, 2);
    const ok = await as(t.accessToken, 'GET', '/auth/sessions');
    assert.equal(ok.status, 200, `from inside the ranges: ${ok.text}`);
    // The gateway's clients are on loopback: a range without it puts this caller outside.
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"allowed_ip_ranges": ["10.0.0.0/8"]}' WHERE id = 'atktoday-ip'`,
    );
    const edge = await as(t.accessToken, 'GET', '/v1/countries');
    assert.equal(edge.status, 403, `the edge refuses it on an administration route: ${edge.text}`);
    for (const [method, path] of [
      ['GET', '/auth/sessions'],
      ['GET', '/auth/passkeys'],
      ['POST', '/auth/mfa/challenge'],
    ] as const) {
      const r = await as(
        t.accessToken,
        method,
        path,
        method === 'POST' ? { method: 'DELETE', path: '/v1/sessions/x' } : undefined,
      );
      assert.equal(r.status, 403, `${method} ${path} from outside the ranges: ${r.status} ${r.text}`);
    }
  });

  it('an unbound staff token in a tenant that requires DPoP is refused on the routes core checks itself too', async () => {
    await tenantWithAdmin('atktoday-dpop');
    const keys = await stackKeys(tdb.db, e2e.dataDir);
    const member = await addStaff(tdb.db, 'atktoday-dpop', 'dpop@atktoday.example', ['admin']);
    const t = await signIn(tdb.db, keys, 'atktoday-dpop', member, 2);
    await tdb.db.query(
      `UPDATE tenants SET security = security || '{"require_dpop": true}' WHERE id = 'atktoday-dpop'`,
    );
    refusedWith(await as(t.accessToken, 'GET', '/v1/countries'), 'invalid_dpop_proof', 'at the edge');
    for (const path of ['/auth/sessions', '/auth/passkeys'])
      refusedWith(await as(t.accessToken, 'GET', path), 'invalid_dpop_proof', `GET ${path}`);
  });
});
