import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, eventually, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

interface AuditRow {
  tenant_id: string;
  action: string;
  actor: { type: string; id: string };
  decision: Record<string, unknown>;
  attrs: Record<string, unknown>;
}

/**
 * Issue 20 items 3 and 5 through the dev gateway, nothing mocked: relationship tuples written,
 * listed and deleted by a tenant's Admin and by the platform admins (the demo tenant is the
 * development operator), tenant isolation of what a tuple may name, a tuple change reaching the
 * edge's decision by NOTIFY; core's audit records carrying the decision of the request that
 * caused them; the `_platform` chain readable and verifiable by platform admins only.
 */
describe('relationship tuples and the audit through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let j: Journey;
  let alice: Customer;
  let bob: Customer;
  const tok: Record<string, string> = {};

  const as =
    (who: string) =>
    (
      method: string,
      path: string,
      o: { json?: unknown; headers?: Record<string, string> } = {},
    ): Promise<Res> =>
      call(gw, method, path, {
        ...(o.json !== undefined ? { json: o.json } : {}),
        headers: { authorization: `Bearer ${tok[who]}`, 'x-request-id': randomUUID(), ...o.headers },
      });
  const put = (who: string, tenant: string, tuple: unknown, ua = 'tuples-e2e') =>
    as(who)('PUT', `/v1/tenants/${tenant}/tuples`, {
      json: tuple,
      headers: { 'idempotency-key': `tp-${randomUUID()}`, 'user-agent': ua },
    });
  const del = (who: string, tenant: string, key: unknown) =>
    as(who)('POST', `/v1/tenants/${tenant}/tuples:delete`, {
      json: key,
      headers: { 'idempotency-key': `td-${randomUUID()}` },
    });
  const rowsOf = async (tenant: string, action: string) =>
    (
      await tdb.db.query<AuditRow>(
        'SELECT tenant_id, action, actor, decision, attrs FROM audit_log WHERE tenant_id = $1 AND action = $2 ORDER BY id',
        [tenant, action],
      )
    ).rows;

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-tuples-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Demo & {
      serviceTokens: Record<'admin' | 'ops', { token: string }>;
    };
    j = journey(gw, dataDir, tdb.db, demo);
    tok.platform = demo.serviceTokens.admin.token;
    tok.ops = demo.serviceTokens.ops.token;
    const created = await as('platform')('POST', '/v1/tenants', {
      json: { id: 'acme', name: 'Acme Pay', country: 'KE', baseCurrency: 'KES' },
      headers: { 'idempotency-key': 'e2e-acme-tenant' },
    });
    assert.equal(created.status, 201, created.text);
    tok.acme = await putServiceToken(tdb.db, 'acme', 'e2e-acme-admin', ['admin']);
    alice = await j.signUp('+254711300001');
    bob = await j.signUp('+254711300002');
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('a tenant Admin writes (idempotently, with a caveat), lists with filters and a cursor, and deletes tuples; each change audited', async () => {
    const payer = {
      subject: { ns: 'customer', id: alice.id },
      relation: 'payer',
      object: { ns: 'customer', id: bob.id },
    };
    const first = await put('platform', 'demo', payer);
    assert.equal(first.status, 201, first.text);
    assert.deepEqual(first.json.caveat, {});
    const again = await put('platform', 'demo', payer);
    assert.equal(again.status, 200, again.text);
    assert.equal(
      (await rowsOf('demo', 'tuple.create')).length,
      1,
      'rewriting the same tuple changes and audits nothing',
    );
    const expires = new Date(Date.now() + 86_400_000).toISOString();
    const caveated = await put('platform', 'demo', {
      ...payer,
      caveat: { expires_at: expires, ip_ranges: ['0.0.0.0/0'] },
    });
    assert.equal(caveated.status, 200, caveated.text);
    assert.equal(caveated.json.caveat.expires_at, expires);
    assert.equal((await rowsOf('demo', 'tuple.update')).length, 1);

    const bad = await put('platform', 'demo', { ...payer, caveat: { ip_ranges: ['not-a-cidr'] } });
    assert.equal(bad.status, 422, bad.text);
    assert.equal(bad.json.code, 'TUPLE_INVALID');
    const past = await put('platform', 'demo', { ...payer, caveat: { expires_at: '2020-01-01T00:00:00Z' } });
    assert.equal(past.json.code, 'TUPLE_INVALID');

    const bySubject = await as('platform')('GET', `/v1/tenants/demo/tuples?subject=customer:${alice.id}`);
    assert.equal(bySubject.status, 200, bySubject.text);
    assert.deepEqual(bySubject.json.items.map((t: { relation: string }) => t.relation).sort(), [
      'member',
      'payer',
    ]);
    const byRelation = await as('platform')(
      'GET',
      `/v1/tenants/demo/tuples?relation=payer&object=customer:${bob.id}`,
    );
    assert.equal(byRelation.json.items.length, 1);
    assert.equal(byRelation.json.items[0].subject.id, alice.id);
    const p1 = await as('ops')('GET', `/v1/tenants/demo/tuples?subject=customer:${alice.id}&limit=1`);
    assert.equal(p1.status, 200, p1.text);
    assert.equal(p1.json.items.length, 1);
    assert.ok(p1.json.next_cursor);
    const p2 = await as('ops')(
      'GET',
      `/v1/tenants/demo/tuples?subject=customer:${alice.id}&limit=1&cursor=${encodeURIComponent(p1.json.next_cursor)}`,
    );
    assert.equal(p2.json.items.length, 1);
    assert.notEqual(p2.json.items[0].relation, p1.json.items[0].relation);
    assert.equal(p2.json.next_cursor, null);
    assert.equal(
      (
        await as('ops')('PUT', '/v1/tenants/demo/tuples', {
          json: payer,
          headers: { 'idempotency-key': 'e2e-ops-write' },
        })
      ).status,
      403,
      'Ops reads, only Admins write',
    );

    const gone = await del('platform', 'demo', payer);
    assert.equal(gone.status, 200, gone.text);
    assert.equal((await del('platform', 'demo', payer)).json.code, 'TUPLE_NOT_FOUND');
    assert.equal((await rowsOf('demo', 'tuple.delete')).length, 1);
  });

  it('a tuple change reaches the edge by NOTIFY: removing membership refuses the customer, writing it back lets them in', async () => {
    const member = {
      subject: { ns: 'customer', id: bob.id },
      relation: 'member',
      object: { ns: 'tenant', id: 'demo' },
    };
    const accounts = () => call(gw, 'GET', '/v1/accounts', { headers: j.bearer(bob) });
    assert.equal((await accounts()).status, 200);
    assert.equal((await del('platform', 'demo', member)).status, 200);
    const refused = await eventually(accounts, (r) => r.status === 403);
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.code, 'POLICY_DENIED');
    assert.equal((await put('platform', 'demo', member)).status, 201);
    assert.equal((await eventually(accounts, (r) => r.status === 200)).status, 200);
  });

  it("no tuple names another tenant's subject or object, and only platform admins grant owner, admin or parent over a tenant", async () => {
    const foreign = await put('acme', 'acme', {
      subject: { ns: 'customer', id: alice.id },
      relation: 'member',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(foreign.status, 422, foreign.text);
    assert.equal(foreign.json.code, 'TUPLE_INVALID');
    const otherObject = await put('platform', 'demo', {
      subject: { ns: 'customer', id: alice.id },
      relation: 'viewer',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(otherObject.json.code, 'TUPLE_INVALID');
    const grab = await put('acme', 'acme', {
      subject: { ns: 'staff', id: randomUUID() },
      relation: 'admin',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(grab.status, 403, grab.text);
    assert.equal(grab.json.code, 'TUPLE_PLATFORM_ONLY');
    const selfParent = await put('acme', 'acme', {
      subject: { ns: 'tenant', id: 'demo' },
      relation: 'parent',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(selfParent.json.code, 'TUPLE_PLATFORM_ONLY');
    // Another tenant's tuples are out of reach at the edge (no owner tuple over demo).
    const across = await as('acme')('GET', '/v1/tenants/demo/tuples');
    assert.equal(across.status, 403, across.text);
    assert.equal(across.json.code, 'POLICY_DENIED');
    const owner = await del('acme', 'acme', {
      subject: { ns: 'tenant', id: 'demo' },
      relation: 'owner',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(
      owner.json.code,
      'TUPLE_PLATFORM_ONLY',
      "a tenant cannot remove the operator's ownership either",
    );
  });

  it('platform admins grant the operator a parent view of a tenant it owns; both chains record it', async () => {
    const parent = await put('platform', 'acme', {
      subject: { ns: 'tenant', id: 'demo' },
      relation: 'parent',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(parent.status, 201, parent.text);
    assert.equal(parent.json.tenant_id, 'demo', "stored with the operator's other grants over its tenants");
    const list = await as('platform')('GET', '/v1/tenants/acme/tuples?subject=tenant:demo');
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.json.items.map((t: { relation: string }) => t.relation).sort(), [
      'owner',
      'parent',
    ]);
    const seen = await as('acme')('GET', '/v1/tenants/acme/tuples?relation=parent');
    assert.equal(seen.json.items.length, 1, 'the tenant sees who holds a view of it');
    const inAcme = await as('acme')('GET', '/v1/audit?action=tuple.create');
    assert.equal(inAcme.status, 200, inAcme.text);
    assert.equal(inAcme.json.items[0].attrs.actor_tenant, 'demo');
    assert.equal((await rowsOf('demo', 'tuple.create')).at(-1)?.attrs.tenant, 'acme');

    // Without `owner` the parent tuple alone is a view: the operator still lists, and is refused
    // a write at the edge (a write core would refuse anyway, so a stale edge changes nothing).
    const drop = await del('platform', 'acme', {
      subject: { ns: 'tenant', id: 'demo' },
      relation: 'owner',
      object: { ns: 'tenant', id: 'acme' },
    });
    assert.equal(drop.status, 200, drop.text);
    const refused = await eventually(
      () =>
        put('platform', 'acme', {
          subject: { ns: 'customer', id: alice.id },
          relation: 'member',
          object: { ns: 'tenant', id: 'acme' },
        }),
      (r) => r.status === 403,
    );
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.code, 'POLICY_DENIED');
    const view = await as('platform')('GET', '/v1/tenants/acme/tuples?relation=parent');
    assert.equal(view.status, 200, view.text);
    assert.equal(view.json.items.length, 1);
  });

  it("a mutation's audit record carries the decision of its request (purpose, policy and registry version, AAL, trace and decision id) and its ip, ua and risk", async () => {
    const r = await put(
      'platform',
      'demo',
      {
        subject: { ns: 'customer', id: bob.id },
        relation: 'viewer',
        object: { ns: 'customer', id: alice.id },
      },
      'audit-probe/1.0',
    );
    assert.equal(r.status, 201, r.text);
    const traceId = r.headers['x-request-id'];
    const rec = (await rowsOf('demo', 'tuple.create')).find((x) => x.decision.trace_id === traceId);
    assert.ok(rec, 'the record names the request id as its trace id');
    assert.equal(rec.decision.allow, true);
    assert.equal(rec.decision.purpose, 'operational');
    assert.match(String(rec.decision.policy_version), /^[0-9a-f]{8,}/);
    assert.equal(rec.decision.aal, 1);
    assert.equal(rec.attrs.ua, 'audit-probe/1.0');
    assert.equal(rec.attrs.risk, 'low');
    assert.match(String(rec.attrs.ip), /127\.0\.0\.1/, 'the client address the edge saw');
    // The edge's own record of the same request agrees on the versions and the decision id.
    const { rows } = await eventually(
      async () => {
        const q = await tdb.db.query<AuditRow>(
          `SELECT tenant_id, action, actor, decision, attrs FROM audit_log WHERE action = 'authz.decision' AND decision->>'trace_id' = $1`,
          [traceId],
        );
        return { status: q.rows.length, headers: {}, text: '', json: q.rows };
      },
      (x) => x.status > 0,
    ).then((x) => ({ rows: x.json as AuditRow[] }));
    const edge = rows[0];
    assert.ok(edge, 'the edge audited its decision');
    assert.equal(rec.decision.policy_version, edge.decision.policy_version);
    assert.equal(rec.decision.registry_version, edge.attrs.registry_version);
    assert.equal(rec.decision.decision_id, edge.decision.decision_id);

    // A customer's money: the transfer's record names customer.transact and the step-up's AAL 2.
    await j.fund(alice.wallet, '50.00');
    const payee = await j.addPayee(alice, bob.phone);
    assert.equal(payee.status, 201, payee.text);
    const t = await j.transfer(alice, payee.json.id, '5.00');
    assert.equal(t.final.status, 200, t.final.text);
    const created = (await rowsOf('demo', 'transfer.create')).at(-1);
    assert.equal(created?.decision.purpose, 'customer.transact');
    assert.equal(created?.decision.aal, 2);
    assert.ok(created?.decision.policy_version);
    assert.ok(['low', 'medium', 'high'].includes(String(created?.attrs.risk)));
    const payeeRec = (await rowsOf('demo', 'beneficiary.create')).at(-1);
    assert.equal(payeeRec?.decision.purpose, 'customer.beneficiary.manage');
  });

  it("platform admins query and verify the _platform records; a tenant Admin and the operator's Ops are refused", async () => {
    // An unauthenticated request naming no tenant is chained under _platform.
    assert.equal(
      (await call(gw, 'GET', '/v1/accounts', { headers: { 'x-request-id': `no-tenant-${randomUUID()}` } }))
        .status,
      401,
    );
    const page = await eventually(
      () => as('platform')('GET', '/v1/audit?chain=platform&action=authz.decision&limit=5'),
      (r) => r.status === 200 && r.json.items.length > 0,
    );
    assert.equal(page.status, 200, page.text);
    assert.ok(
      page.json.items.every(
        (i: { tenant_id: string; action: string }) =>
          i.tenant_id === '_platform' && i.action === 'authz.decision',
      ),
    );
    const one = page.json.items[0];
    const byId = await as('platform')('GET', `/v1/audit/${one.id}?chain=platform`);
    assert.equal(byId.status, 200, byId.text);
    assert.equal(byId.json.row_hash, one.row_hash);
    assert.equal(
      (await as('platform')('GET', `/v1/audit/${one.id}`)).status,
      404,
      "not a record of the demo tenant's chain",
    );
    const verify = await as('platform')('GET', '/v1/audit:verify?chain=platform');
    assert.equal(verify.status, 200, verify.text);
    assert.equal(verify.json.ok, true);
    assert.ok(verify.json.count > 0);
    const own = await as('platform')('GET', '/v1/audit:verify');
    assert.equal(own.json.ok, true);

    for (const who of ['acme', 'ops']) {
      const list = await as(who)('GET', '/v1/audit?chain=platform');
      assert.equal(list.status, 403, `${who}: ${list.text}`);
      assert.equal(list.json.code, 'FORBIDDEN');
      assert.equal((await as(who)('GET', '/v1/audit:verify?chain=platform')).status, 403);
    }
  });
});
