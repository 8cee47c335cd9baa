/**
 * SPEC 2.10 `require_mtls_for_m2m` with `mtls_trusted_cas` for the machine credentials beside
 * OAuth clients (DESIGN "People and machines"), through the gateway's mutual-TLS listener, the
 * edge and core: a tenant's service tokens and its identity provider's SCIM credential are
 * refused 403 `mtls_required` without a client certificate or with one from a CA the tenant does
 * not list, allowed with one it does; each refusal is audited in the tenant's chain naming the
 * credential; another tenant's machines are untouched; a credential nobody knows is refused as
 * before, telling nothing of the setting.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { Agent } from 'undici';
import type { TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import { eventually, type Res } from '../helpers/http.ts';
import { startMtlsStack, type MtlsStack } from '../helpers/mtls-stack.ts';
import type { Pki } from '../helpers/pki.ts';
import { tenantWithAdmin } from '../helpers/tenants.ts';

type DemoFile = { serviceTokens: Record<'admin', { token: string }> };
/** A tenant's Admin service token and a SCIM credential its Admin issued. */
type Machines = { tenantId: string; admin: string; adminId: string; scim: string; scimId: string };

describe('require_mtls_for_m2m: service tokens and SCIM credentials need a certificate the tenant trusts', () => {
  let m: MtlsStack;
  let tdb: TestDb;
  let gw: string;
  let gwTls: string;
  let demo: DemoFile;
  let pki: Pki;
  let withTrusted: Agent;
  let withForeign: Agent;

  /** `token` calls `path` on the plain listener, or on the mTLS one over `dispatcher`'s certificate. */
  const as = (token: string, method: string, path: string, o: { dispatcher?: Agent; json?: unknown } = {}) =>
    callRetrying(o.dispatcher ? gwTls : gw, method, path, {
      headers: {
        authorization: `Bearer ${token}`,
        'x-request-id': randomUUID(),
        ...(method === 'GET' ? {} : { 'idempotency-key': `k-${randomUUID()}` }),
      },
      ...(o.json !== undefined ? { json: o.json } : {}),
      ...(o.dispatcher ? { dispatcher: o.dispatcher } : {}),
    });
  /** A read each credential may make: its Admin's list of service tokens, its SCIM client's users. */
  const adminRead = (m: Machines, dispatcher?: Agent) =>
    as(m.admin, 'GET', '/v1/service-tokens', dispatcher ? { dispatcher } : {});
  const scimRead = (m: Machines, dispatcher?: Agent) =>
    as(m.scim, 'GET', '/scim/v2/Users', dispatcher ? { dispatcher } : {});

  /** The edge's refusal: 403 naming mutual TLS, in the route's audience format (problem+json, SCIM). */
  const mtlsRefused = (r: Res, what: string) => {
    assert.equal(r.status, 403, `${what}: ${r.text}`);
    assert.match(r.json?.detail ?? '', /requires mutual TLS for machine clients/, `${what}: ${r.text}`);
    if (r.json?.schemas === undefined) assert.equal(r.json?.code, 'mtls_required', `${what}: ${r.text}`);
  };

  /** A new tenant with its Admin's service token and a SCIM credential. */
  async function tenantWithMachines(tenantId: string): Promise<Machines> {
    const admin = await tenantWithAdmin(gw, demo.serviceTokens.admin.token, tdb.db, tenantId);
    const issued = await as(admin, 'POST', '/v1/scim-credentials', { json: { name: 'idp' } });
    assert.equal(issued.status, 201, issued.text);
    const { rows } = await tdb.db.query<{ id: string }>(
      `SELECT id FROM service_tokens WHERE tenant_id = $1 AND name = $2`,
      [tenantId, `${tenantId}-admin`],
    );
    return { tenantId, admin, adminId: rows[0]?.id ?? '', scim: issued.json.token, scimId: issued.json.id };
  }

  /** The Admin turns the setting on over a trusted certificate (GET, PUT If-Match); the edge hears of it. */
  async function requireMtls(m: Machines, trustedCas: string[]): Promise<void> {
    const path = `/v1/tenants/${m.tenantId}/security`;
    const read = await as(m.admin, 'GET', path, { dispatcher: withTrusted });
    assert.equal(read.status, 200, read.text);
    const put = await callRetrying(gwTls, 'PUT', path, {
      json: { ...read.json, require_mtls_for_m2m: true, mtls_trusted_cas: trustedCas },
      headers: {
        authorization: `Bearer ${m.admin}`,
        'x-request-id': randomUUID(),
        'idempotency-key': `k-${randomUUID()}`,
        'if-match': read.headers.etag ?? '',
      },
      dispatcher: withTrusted,
    });
    assert.equal(put.status, 200, put.text);
    // The edge reads the setting once the NOTIFY has dropped its cached tenant.
    await eventually(
      () => adminRead(m),
      (r) => r.status === 403,
    );
  }

  /** The actors of the edge's refusals in `tenantId`'s chain, polled for 5 s until `done` (batched writes). */
  const refusalActors = async (tenantId: string, done: (ids: string[]) => boolean): Promise<string[]> => {
    const sql = `SELECT actor FROM audit_log WHERE tenant_id = $1 AND action = 'authz.decision' AND decision->>'code' = 'mtls_required' ORDER BY id`;
    const until = Date.now() + 5000;
    for (;;) {
      const { rows } = await tdb.db.query<{ actor: { type: string; id: string } }>(sql, [tenantId]);
      const ids = rows.map((r) => `${r.actor.type}/${r.actor.id}`);
      if (done(ids) || Date.now() > until) return ids;
      await new Promise((res) => setTimeout(res, 100));
    }
  };

  before(async () => {
    m = await startMtlsStack('mtlsmach');
    ({ tdb, gw } = m.e2e);
    ({ gwTls, pki } = m);
    demo = m.e2e.demo as DemoFile;
    withTrusted = m.agent(await pki.client('/O=Acme/CN=provisioning'));
    // The same subject under a CA the front door trusts for some other tenant.
    withForeign = m.agent(await m.foreignPki.client('/O=Acme/CN=provisioning'));
  });
  after(async () => {
    await m?.stop();
  });

  it('refuses them without a certificate or with an untrusted one, allows a trusted one, and audits each refusal naming the credential', async () => {
    const on = await tenantWithMachines('mtlsmach-on');
    const off = await tenantWithMachines('mtlsmach-off');
    await requireMtls(on, [pki.ca.cert]);

    mtlsRefused(await adminRead(on), 'service token without a certificate');
    mtlsRefused(await adminRead(on, withForeign), "service token over another tenant's CA's certificate");
    mtlsRefused(await scimRead(on), 'SCIM credential without a certificate');
    mtlsRefused(await scimRead(on, withForeign), "SCIM credential over another tenant's CA's certificate");
    const allowedAdmin = await adminRead(on, withTrusted);
    assert.equal(allowedAdmin.status, 200, `service token, trusted certificate: ${allowedAdmin.text}`);
    const allowedScim = await scimRead(on, withTrusted);
    assert.equal(allowedScim.status, 200, `SCIM credential, trusted certificate: ${allowedScim.text}`);

    const token = `service/service-token:${on.adminId}`;
    const scim = `service/scim-credential:${on.scimId}`;
    const count = (ids: string[], id: string) => ids.filter((x) => x === id).length;
    // Beside these four, the refusals of the service token while the edge caught up with the setting.
    const ids = await refusalActors(on.tenantId, (x) => count(x, token) >= 2 && count(x, scim) >= 2);
    assert.ok(
      ids.every((id) => id === token || id === scim),
      `each names the credential: ${ids}`,
    );
    assert.equal(count(ids, scim), 2, `${ids}`);
    assert.ok(count(ids, token) >= 2, `${ids}`);

    // Another tenant's machines: plain HTTP as before.
    assert.equal((await adminRead(off)).status, 200, 'other tenant, service token');
    assert.equal((await scimRead(off)).status, 200, 'other tenant, SCIM credential');
  });

  it("on the plain listener a certificate in a header is no certificate; an Admin's tooling that turned the setting on from there gets back in over a trusted certificate", async () => {
    const t = await tenantWithMachines('mtlsmach-spoof');
    const path = `/v1/tenants/${t.tenantId}/security`;
    /** The Admin's PUT of the settings with `require_mtls_for_m2m: on`, over `dispatcher` (plain HTTP without). */
    const put = async (on: boolean, dispatcher?: Agent) => {
      const read = await as(t.admin, 'GET', path, dispatcher ? { dispatcher } : {});
      assert.equal(read.status, 200, read.text);
      return callRetrying(dispatcher ? gwTls : gw, 'PUT', path, {
        json: { ...read.json, require_mtls_for_m2m: on, mtls_trusted_cas: [pki.ca.cert] },
        headers: {
          authorization: `Bearer ${t.admin}`,
          'x-request-id': randomUUID(),
          'idempotency-key': `k-${randomUUID()}`,
          'if-match': read.headers.etag ?? '',
        },
        ...(dispatcher ? { dispatcher } : {}),
      });
    };
    // Turned on from plain HTTP: the tooling that did it is refused from its next call there.
    const on = await put(true);
    assert.equal(on.status, 200, on.text);
    mtlsRefused(
      await eventually(
        () => adminRead(t),
        (r) => r.status === 403,
      ),
      'the tooling on plain HTTP once the setting is on',
    );
    // A certificate copied into any header the front door or the edge might be thought to read.
    const pem = encodeURIComponent((await pki.client('/O=Acme/CN=provisioning')).cert);
    for (const header of [
      'x-client-certificate',
      'x-forwarded-client-cert',
      'x-ssl-client-cert',
      'ssl-client-cert',
    ])
      for (const [token, p] of [
        [t.admin, '/v1/service-tokens'],
        [t.scim, '/scim/v2/Users'],
      ] as const) {
        const r = await callRetrying(gw, 'GET', p, {
          headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), [header]: pem },
        });
        mtlsRefused(r, `${p} with the certificate in ${header}`);
      }
    // The way back: the same tooling over a certificate the tenant trusts turns it off.
    const off = await put(false, withTrusted);
    assert.equal(off.status, 200, off.text);
    const plain = await eventually(
      () => adminRead(t),
      (r) => r.status === 200,
    );
    assert.equal(plain.status, 200, `plain HTTP once the setting is off: ${plain.text}`);
  });

  it('a credential nobody issued is refused as before, telling nothing of any setting', async () => {
    const on = await tenantWithMachines('mtlsmach-guess');
    await requireMtls(on, [pki.ca.cert]);
    for (const [what, r] of [
      ['service token', await as(`svc_${randomUUID()}`, 'GET', '/v1/service-tokens')],
      ['SCIM credential', await as(`scim_${randomUUID()}`, 'GET', '/scim/v2/Users')],
    ] as const) {
      assert.equal(r.status, 401, `${what}: ${r.text}`);
      assert.doesNotMatch(r.text, /mutual TLS|mtls/, what);
    }
  });
  it('core reached directly acts on neither credential: it trusts only what the edge vouched for', async () => {
    const on = await tenantWithMachines('mtlsmach-core');
    await requireMtls(on, [pki.ca.cert]);
    for (const [what, token, path] of [
      ['service token', on.admin, '/v1/service-tokens'],
      ['SCIM credential', on.scim, '/scim/v2/Users'],
    ] as const) {
      const r = await callRetrying(m.e2e.core, 'GET', path, {
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID() },
      });
      assert.equal(r.status, 401, `${what} at core: ${r.text}`);
    }
  });
});
