/**
 * Attacks on tenant onboarding (issue 20) through the dev gateway, as an insider of the operator
 * tenant: secrets a first-admin answer carries must not be readable from where they are stored.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { callRetrying } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';
import { makeForge } from '../helpers/pki-forge.ts';
import { keyAndRequestArgs } from '../helpers/pki.ts';

interface DemoFile {
  serviceTokens: Record<'admin', { token: string }>;
}

describe('onboarding under attack', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let demo: DemoFile;

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-attack-onboarding-'));
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
    demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as DemoFile;
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const send = (
    method: string,
    path: string,
    token: string,
    json?: unknown,
    extra: Record<string, string> = {},
  ): Promise<Res> =>
    callRetrying(gw, method, path, {
      ...(json !== undefined ? { json } : {}),
      headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...extra },
    });

  /** A new tenant the operator's Admin creates; its id. */
  async function newTenant(name: string): Promise<string> {
    const id = `atk-${randomUUID().slice(0, 8)}`;
    const t = await send(
      'POST',
      '/v1/tenants',
      demo.serviceTokens.admin.token,
      { id, name, country: 'KE', baseCurrency: 'KES' },
      { 'idempotency-key': `k-${randomUUID()}` },
    );
    assert.equal(t.status, 201, t.text);
    return id;
  }

  it("a first Admin's enrolment link is not readable from the stored idempotency record", async () => {
    const admin = demo.serviceTokens.admin.token;
    const tenantId = await newTenant('Attack B');
    const key = `k-${randomUUID()}`;
    const first = await send(
      'POST',
      `/v1/tenants/${tenantId}/first-admin`,
      admin,
      { userName: 'admin@atk.example' },
      { 'idempotency-key': key },
    );
    assert.equal(first.status, 201, first.text);
    const token = first.json.link.token as string;
    assert.ok(token.length > 10);
    const stored = await send('GET', `/v1/idempotency/${key}`, admin);
    assert.equal(stored.status, 200, stored.text);
    assert.equal(stored.json.secret_redacted, true);
    assert.ok(
      !stored.text.includes(token),
      `the enrolment token is readable in the stored record: ${stored.text}`,
    );
    assert.ok(!stored.text.includes(encodeURIComponent(token)), 'nor URL-encoded');
  });

  it("an unrestricted tenant's security settings put back as read are accepted (resident_regions [] stays unset)", async () => {
    const admin = demo.serviceTokens.admin.token;
    const read = await send('GET', '/v1/tenants/demo/security', admin);
    assert.equal(read.status, 200, read.text);
    assert.deepEqual(read.json.resident_regions, []);
    const etag = read.headers.etag;
    assert.ok(typeof etag === 'string');
    const put = await send(
      'PUT',
      '/v1/tenants/demo/security',
      admin,
      { ...read.json, session_timeout_minutes: 45 },
      { 'if-match': etag, 'idempotency-key': `k-${randomUUID()}` },
    );
    assert.equal(put.status, 200, put.text);
    const again = await send('GET', '/v1/tenants/demo/security', admin);
    assert.equal(again.json.session_timeout_minutes, 45);
    assert.deepEqual(again.json.resident_regions, []);
    // Still served: no resident_regions stored that would exclude this cluster.
    const tenant = await send('GET', '/v1/tenants/demo', admin);
    assert.equal(tenant.status, 200, tenant.text);
    assert.equal(tenant.json.residentRegions, undefined);
  });

  /** A self-signed CA valid from `start` to `end` (openssl ca: `openssl x509` of OpenSSL 3.0 takes no start date). */
  async function caBetween(name: string, start: string, end: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'ca-dates-'));
    try {
      const conf = [
        '[ca]',
        'default_ca = d',
        '[d]',
        'database = index.txt',
        'new_certs_dir = .',
        'serial = serial',
        'default_md = sha256',
        'policy = p',
        '[p]',
        'commonName = supplied',
        '[v3]',
        'basicConstraints = critical,CA:TRUE',
        'keyUsage = critical,keyCertSign,cRLSign',
      ].join('\n');
      await writeFile(join(dir, 'ca.cnf'), `${conf}\n`);
      await writeFile(join(dir, 'index.txt'), '');
      await writeFile(join(dir, 'serial'), '01\n');
      const ssl = (...args: string[]) =>
        execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
      ssl(...keyAndRequestArgs('r', `/CN=${name}`));
      ssl(
        'ca',
        '-batch',
        '-config',
        'ca.cnf',
        '-selfsign',
        '-keyfile',
        'r.key',
        '-in',
        'r.csr',
        '-startdate',
        start,
        '-enddate',
        end,
        '-extensions',
        'v3',
        '-notext',
        '-out',
        'ca.pem',
      );
      return await readFile(join(dir, 'ca.pem'), 'utf8');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it('an Admin PUT of security settings refuses a trusted CA outside its validity, naming its index and dates, never its PEM', async () => {
    const admin = demo.serviceTokens.admin.token;
    const tenantId = await newTenant('Attack CA');
    const forge = makeForge();
    try {
      const valid = forge.ca({ subject: '/CN=Valid CA', days: 30 }).cert;
      const expired = await caBetween('Expired CA', '20200101000000Z', '20210101000000Z');
      const future = await caBetween('Future CA', '20900101000000Z', '20910101000000Z');
      const path = `/v1/tenants/${tenantId}/security`;
      const put = async (cas: string[]) => {
        const read = await send('GET', path, admin);
        assert.equal(read.status, 200, read.text);
        const etag = read.headers.etag;
        assert.ok(typeof etag === 'string');
        return send(
          'PUT',
          path,
          admin,
          { ...read.json, mtls_trusted_cas: cas },
          {
            'if-match': etag,
            'idempotency-key': `k-${randomUUID()}`,
          },
        );
      };
      const pemBody = (pem: string) => pem.split('\n')[1] ?? pem;
      for (const [what, cas, bad] of [
        ['expired', [expired], [0]],
        ['not yet valid', [future], [0]],
        ['one expired in a list', [valid, expired], [1]],
        ['one not yet valid in a list', [future, valid], [0]],
      ] as const) {
        const r = await put([...cas]);
        assert.equal(r.status, 422, `${what}: ${r.text}`);
        assert.equal(r.json.code, 'SECURITY_INVALID', `${what}: ${r.text}`);
        for (const i of [0, 1])
          assert.equal(
            r.text.includes(`mtls_trusted_cas[${i}]: not valid now`),
            (bad as readonly number[]).includes(i),
            `${what}: index ${i} in ${r.text}`,
          );
        assert.match(r.text, /valid from \w{3} +\d+ [\d:]+ \d{4} GMT to \w{3} +\d+ [\d:]+ \d{4} GMT/, what);
        for (const pem of cas) assert.ok(!r.text.includes(pemBody(pem)), `${what}: no PEM text echoed`);
      }
      const ok = await put([valid]);
      assert.equal(ok.status, 200, ok.text);
      assert.deepEqual(ok.json.mtls_trusted_cas, [valid]);
      // Nothing refused was stored.
      const after = await send('GET', path, admin);
      assert.deepEqual(after.json.mtls_trusted_cas, [valid]);
      // A CA the tenant trusts that has since expired (stored as time would leave it) does not
      // block the Admin's other changes: the list GET shows goes back as it was; a newly listed
      // expired CA is still refused.
      await tdb.db.query(
        `UPDATE tenants SET security = jsonb_set(security, '{mtls_trusted_cas}', $2::jsonb) WHERE id = $1`,
        [tenantId, JSON.stringify([valid, expired])],
      );
      const read = await send('GET', path, admin);
      assert.deepEqual(read.json.mtls_trusted_cas, [valid, expired]);
      const other = await send(
        'PUT',
        path,
        admin,
        { ...read.json, session_timeout_minutes: 20 },
        { 'if-match': read.headers.etag as string, 'idempotency-key': `k-${randomUUID()}` },
      );
      assert.equal(other.status, 200, other.text);
      assert.deepEqual(other.json.mtls_trusted_cas, [valid, expired]);
      const added = await put([valid, expired, future]);
      assert.equal(added.status, 422, added.text);
      assert.match(added.text, /mtls_trusted_cas\[2\]: not valid now/);
      assert.doesNotMatch(added.text, /mtls_trusted_cas\[1\]/);
      // Nothing rides in behind the kept CA: X509Certificate reads the first certificate of a text
      // only, so a CA appended to the expired one would be stored never checked, its fingerprint
      // in no audit record and no tenant's rule.
      const smuggled = await put([valid, expired + future]);
      assert.equal(smuggled.status, 422, smuggled.text);
      assert.match(smuggled.text, /mtls_trusted_cas\[1\]: not one PEM certificate/);
      assert.ok(!smuggled.text.includes(pemBody(future)), 'no PEM text echoed');
      assert.deepEqual((await send('GET', path, admin)).json.mtls_trusted_cas, [valid, expired]);
    } finally {
      forge.dispose();
    }
  });

  it("a CA kept through expiry is the target tenant's own: not the Admin's tenant's, nor another managed tenant's", async () => {
    const admin = demo.serviceTokens.admin.token;
    const target = await newTenant('Attack kept target');
    const sibling = await newTenant('Attack kept sibling');
    const { rows } = await tdb.db.query<{ owner: string; security: unknown }>(
      `SELECT o.owner_tenant_id AS owner, t.security FROM admin_tenant_owners o
         JOIN tenants t ON t.id = o.owner_tenant_id WHERE o.tenant_id = $1`,
      [target],
    );
    const owner = rows[0];
    assert.ok(owner, 'the tenant has an owner');
    const expired = await caBetween('Kept elsewhere CA', '20200101000000Z', '20210101000000Z');
    const store = (id: string, security: unknown) =>
      tdb.db.query('UPDATE tenants SET security = $2::jsonb WHERE id = $1', [id, JSON.stringify(security)]);
    const putCas = async (id: string, cas: string[]) => {
      const path = `/v1/tenants/${id}/security`;
      const read = await send('GET', path, admin);
      assert.equal(read.status, 200, read.text);
      return send(
        'PUT',
        path,
        admin,
        { ...read.json, mtls_trusted_cas: cas },
        { 'if-match': read.headers.etag as string, 'idempotency-key': `k-${randomUUID()}` },
      );
    };
    try {
      await store(owner.owner, { ...(owner.security as object), mtls_trusted_cas: [expired] });
      await store(sibling, { mtls_trusted_cas: [expired] });
      const refused = await putCas(target, [expired]);
      assert.equal(refused.status, 422, refused.text);
      assert.match(refused.text, /mtls_trusted_cas\[0\]: not valid now/);
      const own = await send('GET', `/v1/tenants/${target}/security`, admin);
      assert.deepEqual(own.json.mtls_trusted_cas, [], 'nothing stored');
      // The tenant that does list it keeps it.
      assert.equal((await putCas(sibling, [expired])).status, 200);
    } finally {
      await store(owner.owner, owner.security);
    }
  });

  it('two creations of the same agent at once: one 201, the others 409 AGENT_EXISTS, never a 500', async () => {
    const admin = demo.serviceTokens.admin.token;
    const outlet = await send(
      'POST',
      '/v1/outlets',
      admin,
      { name: 'Race shop', region: 'Nairobi' },
      { 'idempotency-key': `k-${randomUUID()}` },
    );
    assert.equal(outlet.status, 201, outlet.text);
    // The PIN is hashed (argon2id) between the uniqueness check and the insert: concurrent requests all pass the check.
    const create = (i: number) =>
      send(
        'POST',
        '/v1/agents',
        admin,
        { code: 'RACE01', phone: `+25470000090${i}`, name: 'Racer', outletId: outlet.json.id },
        { 'idempotency-key': `k-${randomUUID()}` },
      );
    const answers = await Promise.all([0, 1, 2].map(create));
    const statuses = answers.map((r) => r.status).sort();
    assert.deepEqual(statuses, [201, 409, 409], answers.map((r) => r.text).join('\n'));
    for (const r of answers.filter((x) => x.status === 409)) assert.equal(r.json.code, 'AGENT_EXISTS');
  });
});
