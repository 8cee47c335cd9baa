import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import { expireDecisionInputs } from '../../edge/decision-inputs.ts';
import { defaultBundleDir } from '../../policy/runtime/bundle.ts';
import { regoCandidate } from '../helpers/candidates.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';

/** Issue 22's routes and recorded inputs attacked from outside, through the dev gateway. */
describe('attack: policy impact, candidates, shadow and recorded inputs', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let j: Journey;
  let alice: Customer;
  let author = '';
  let readonly = '';

  const as =
    (token: string, extra: Record<string, string> = {}) =>
    (method: string, path: string, json?: unknown): Promise<Res> =>
      call(gw, method, path, {
        ...(json !== undefined ? { json } : {}),
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...extra },
      });

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-atk-impact-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkTimeoutMs: 3000, checkResponses: true });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Demo;
    j = journey(gw, dataDir, tdb.db, demo);
    author = await putServiceToken(tdb.db, 'demo', 'e2e-atk-author', ['policy_author']);
    readonly = await putServiceToken(tdb.db, 'demo', 'e2e-atk-readonly', ['readonly']);
    alice = await j.signUp('+254711300077');
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('a path no route matches is recorded without its raw text (a phone number in it stays out of decision_inputs)', async () => {
    const r = await call(gw, 'GET', `/v1/nothing/${alice.phone}/pin/4826`, {
      headers: { authorization: `Bearer ${alice.access}`, 'x-device-id': alice.device },
    });
    assert.ok(r.status >= 400 && r.status < 500, r.text);
    const digits = alice.phone.replace('+', '');
    const leaked = async () =>
      (
        await tdb.db.query<{ n: string }>(
          'SELECT count(*) AS n FROM decision_inputs WHERE route LIKE $1 OR input::text LIKE $1',
          [`%${digits}%`],
        )
      ).rows[0]?.n;
    const unmatched = async () =>
      Number(
        (
          await tdb.db.query<{ n: string }>(
            `SELECT count(*) AS n FROM decision_inputs WHERE route = 'GET (no route)'`,
          )
        ).rows[0]?.n,
      );
    for (let i = 0; i < 200 && (await unmatched()) === 0; i++)
      await new Promise((res) => setTimeout(res, 25));
    assert.ok((await unmatched()) > 0, 'the unmatched request was recorded, labelled without its path');
    assert.equal(await leaked(), '0', 'the phone number in the path reached a recorded input');
  });

  it('odd bodies and ids on the impact routes are refused with clear codes, never a 500', async () => {
    const h = { authorization: `Bearer ${author}`, 'content-type': 'application/json' };
    const expect = async (r: Promise<Res>, status: number, code?: string) => {
      const x = await r;
      assert.equal(x.status, status, x.text);
      if (code) assert.equal(x.json.code, code, x.text);
    };
    await expect(
      call(gw, 'POST', '/v1/policy/candidates', {
        body: '{"manifest":"{}","registry":"{}","wasm":"AAAA"}',
        headers: { ...h, 'content-type': 'text/plain' },
      }),
      415,
    );
    await expect(
      call(gw, 'POST', '/v1/policy/candidates', {
        body: '{"manifest":"{}","manifest":"[]","registry":"{}","wasm":"AAAA"}',
        headers: h,
      }),
      422,
      'BUNDLE_INVALID',
    );
    await expect(
      as(author)('POST', '/v1/policy/candidates', {
        manifest: '['.repeat(65_000),
        registry: '['.repeat(1_000_000),
        wasm: 'AAAA',
      }),
      422,
      'BUNDLE_INVALID',
    );
    await expect(
      as(author)('POST', '/v1/policy/impact', {
        policy_ref: 'cand-0000000000000000',
        since: '0000-01-01T00:00:00Z',
        until: '0000-01-02T00:00:00Z',
      }),
      400,
    );
    await expect(
      as(author)('POST', '/v1/policy/impact', {
        policy_ref: 'cand-0000000000000000',
        since: '2026-02-30T00:00:00Z',
      }),
      400,
    );
    await expect(as(author)('GET', `/v1/policy/impact/${randomUUID().toUpperCase()}`), 404);
    await expect(as(author)('GET', '/v1/policy/impact/zzz'), 400);
    await expect(as(author)('PUT', '/v1/policy/shadow', [1]), 400);
    // The upload streams past the edge unbuffered: a chunked body with no length is still cut off by core.
    const chunk = Buffer.alloc(1 << 20, 0x41);
    // The sender's own connection is its business; the next caller comes on a connection of its own.
    const sender = new Agent();
    async function* endless() {
      yield Buffer.from('{"manifest":"{}","registry":"{}","wasm":"');
      for (let i = 0; i < 8; i++) yield chunk;
      yield Buffer.from('"}');
    }
    const streamed = await request(`${gw}/v1/policy/candidates`, {
      method: 'POST',
      headers: h,
      body: Readable.from(endless()),
      dispatcher: sender,
    }).then(
      async (r) => ({ status: r.statusCode, text: await r.body.text() }),
      (e: Error) => ({ status: 0, text: e.message }),
    );
    // Core answers before reading the rest (the dev gateway then answers the sender 502); what must
    // not happen is the next caller's request failing on the connection that body left behind.
    assert.ok([413, 502, 0].includes(streamed.status), `${streamed.status} ${streamed.text}`);
    await expect(
      call(gw, 'POST', '/v1/policy/candidates', {
        body: '{"manifest":"{}","registry":"{}","wasm":"AAAA"}',
        headers: h,
      }),
      422,
      'BUNDLE_INVALID',
    );
    await sender.close();
    for (const [m, p] of [
      ['GET', '/v1/policy/shadow'],
      ['DELETE', '/v1/policy/shadow'],
      ['POST', '/v1/policy/candidates'],
    ] as const) {
      await expect(
        as(readonly)(m, p, m === 'POST' ? { manifest: '{}', registry: '{}', wasm: 'AAAA' } : undefined),
        403,
      );
    }
  });

  it('shadow divergences and impact samples (copies of recorded inputs) expire with the retention window', async () => {
    const file = (name: string) => readFile(join(defaultBundleDir, name));
    const up = await as(author)('POST', '/v1/policy/candidates', {
      manifest: (await file('manifest.json')).toString('utf8'),
      registry: (await file('registry.json')).toString('utf8'),
      wasm: (await file('policy.wasm')).toString('base64'),
    });
    assert.equal(up.status, 201, up.text);
    const ref = up.json.policy_ref as string;
    const now = Date.now();
    const old = new Date(now - 48 * 3_600_000);
    for (const at of [old, new Date(now)]) {
      await tdb.db.query(
        `INSERT INTO policy_shadow_divergences (tenant_id, candidate_ref, recorded_at, decision_id, purpose, route, live_allow, shadow_allow, shadow_code, input)
         VALUES ('demo', $1, $2, $3, 'p', 'GET /x', true, false, 'c', '{"subject":{"id":"p_x"}}')`,
        [ref, at, at.toISOString()],
      );
      await tdb.db.query(
        `INSERT INTO policy_impact_jobs (id, tenant_id, candidate_ref, since, until, status, requested_by, result, finished_at, created_at)
         VALUES ($1, 'demo', $2, $3, $3, 'done', 'x', '{"samples":[{"input":{"subject":{"id":"p_x"}}}]}', $3, $3)`,
        [randomUUID(), ref, at],
      );
    }
    await expireDecisionInputs(tdb.db, { retentionHours: 24, maxBytes: 1 << 30 }, now);
    const divergences = await tdb.db.query<{ recorded_at: Date }>(
      'SELECT recorded_at FROM policy_shadow_divergences WHERE candidate_ref = $1',
      [ref],
    );
    assert.deepEqual(
      divergences.rows.map((r) => r.recorded_at.getTime()),
      [now],
      'the divergence past the window is gone, the recent one kept',
    );
    const jobs = await tdb.db.query<{ finished_at: Date; n: number }>(
      `SELECT finished_at, jsonb_array_length(result->'samples') AS n FROM policy_impact_jobs WHERE candidate_ref = $1 ORDER BY finished_at`,
      [ref],
    );
    assert.deepEqual(
      jobs.rows.map((r) => r.n),
      [0, 1],
      'samples of a job finished past the window are gone; counts stay',
    );
  });

  it('a candidate whose trace carries a NUL character still ends its job (it never wedges as running, its candidate undeletable)', async () => {
    // PostgreSQL's jsonb refuses \u0000: a result holding one failed every write of the job.
    const nul = `package payments.authz

verdict := {
	"allow": false, "status": 403, "code": "no\\u0000", "message": "m\\u0000", "step_up": false,
	"obligations": {}, "policy_version": "x", "registry_version": "x",
}

decision := object.union(verdict, {"reasons": [{"check": "c\\u0000", "ok": false, "detail": {"k\\u0000": "v\\u0000"}}]})
`;
    const since = new Date(Date.now() - 3_600_000).toISOString();
    for (let i = 0; i < 2; i++)
      assert.equal(
        (
          await call(gw, 'GET', '/v1/accounts', {
            headers: { authorization: `Bearer ${alice.access}`, 'x-device-id': alice.device },
          })
        ).status,
        200,
      );
    const allowed = async () =>
      Number(
        (
          await tdb.db.query<{ n: string }>(
            `SELECT count(*) AS n FROM decision_inputs WHERE tenant_id = 'demo' AND allow AND route = 'GET /v1/accounts'`,
          )
        ).rows[0]?.n,
      );
    for (let i = 0; i < 200 && (await allowed()) < 2; i++) await new Promise((r) => setTimeout(r, 25));
    const up = await as(author)('POST', '/v1/policy/candidates', await regoCandidate(nul, 'atk-nul'));
    assert.equal(up.status, 201, up.text);
    const ref = up.json.policy_ref as string;
    const started = await as(author)('POST', '/v1/policy/impact', {
      policy_ref: ref,
      since,
      until: new Date().toISOString(),
    });
    assert.equal(started.status, 202, started.text);
    let job = started;
    for (let i = 0; i < 600 && (job.json.status === 'queued' || job.json.status === 'running'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      job = await as(author)('GET', `/v1/policy/impact/${started.json.id}`);
      assert.equal(job.status, 200, job.text);
    }
    assert.equal(job.json.status, 'done', job.text);
    assert.ok(job.json.result.allow_to_deny >= 2, job.text);
    const sample = job.json.result.samples[0];
    assert.equal(sample.candidate.message, 'm\uFFFD', 'the NUL is replaced, the rest kept');
    const gone = await as(author)('DELETE', `/v1/policy/candidates/${ref}`);
    assert.equal(gone.status, 204, gone.text);
  });

  it("a candidate's traces are kept bounded in the job's result, however much the candidate writes", async () => {
    // Two hundred thousand characters in each denial's message and check detail: every sample carried them
    // into the result core stringifies on every page and answers on every poll.
    const big = `package payments.authz

big := concat("", [s | some i in numbers.range(1, 20000); s := "0123456789"])

verdict := {
	"allow": false, "status": 403, "code": "no", "message": big, "step_up": false,
	"obligations": {}, "policy_version": "x", "registry_version": "x",
}

decision := object.union(verdict, {"reasons": [{"check": "c", "ok": false, "detail": big}]})
`;
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const up = await as(author)('POST', '/v1/policy/candidates', await regoCandidate(big, 'atk-big'));
    assert.equal(up.status, 201, up.text);
    const ref = up.json.policy_ref as string;
    const started = await as(author)('POST', '/v1/policy/impact', {
      policy_ref: ref,
      since,
      until: new Date().toISOString(),
    });
    assert.equal(started.status, 202, started.text);
    let job = started;
    for (let i = 0; i < 600 && (job.json.status === 'queued' || job.json.status === 'running'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      job = await as(author)('GET', `/v1/policy/impact/${started.json.id}`);
      assert.equal(job.status, 200, job.text.slice(0, 500));
    }
    assert.equal(job.json.status, 'done', job.text.slice(0, 500));
    assert.ok(job.json.result.allow_to_deny >= 2, job.text.slice(0, 500));
    const sample = job.json.result.samples.find((s: { change: string }) => s.change === 'allow_to_deny');
    assert.ok(sample.candidate, 'the flip keeps its candidate trace');
    assert.equal(sample.candidate.allow, false);
    assert.ok(JSON.stringify(sample.candidate).length <= 20_000, 'a trace is bounded');
    assert.ok(job.text.length < 200_000, `the job answers ${job.text.length} characters`);
    assert.equal((await as(author)('DELETE', `/v1/policy/candidates/${ref}`)).status, 204);
  });

  it("another tenant's author, a customer and read-only staff reach no candidate, job or shadow of the tenant", async () => {
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('atk-other', 'Other', 'KE', 'KES') ON CONFLICT DO NOTHING`,
    );
    const stranger = await putServiceToken(tdb.db, 'atk-other', 'e2e-atk-stranger', ['policy_author']);
    const file = (name: string) => readFile(join(defaultBundleDir, name));
    const up = await as(author)('POST', '/v1/policy/candidates', {
      manifest: (await file('manifest.json')).toString('utf8'),
      registry: (await file('registry.json')).toString('utf8'),
      wasm: (await file('policy.wasm')).toString('base64'),
    });
    assert.ok(up.status === 200 || up.status === 201, up.text);
    const ref = up.json.policy_ref as string;
    const since = new Date(Date.now() - 60_000).toISOString();
    const started = await as(author)('POST', '/v1/policy/impact', { policy_ref: ref, since });
    assert.equal(started.status, 202, started.text);
    const id = started.json.id as string;
    const other = as(stranger);
    assert.equal((await other('GET', `/v1/policy/impact/${id}`)).json.code, 'IMPACT_JOB_NOT_FOUND');
    assert.equal((await other('POST', '/v1/policy/impact', { policy_ref: ref, since })).status, 404);
    assert.equal((await other('PUT', '/v1/policy/shadow', { policy_ref: ref })).status, 404);
    assert.equal((await other('DELETE', `/v1/policy/candidates/${ref}`)).status, 404);
    const theirs = await other('GET', '/v1/policy/candidates');
    assert.equal(theirs.status, 200, theirs.text);
    assert.deepEqual(theirs.json.candidates, []);
    assert.equal(
      (await as(author)('GET', '/v1/policy/shadow')).json.shadow,
      null,
      'no shadow was set by the stranger',
    );
    const customer = { 'x-device-id': alice.device };
    for (const [token, extra] of [
      [alice.access, customer],
      [readonly, {}],
    ] as const) {
      for (const [m, p, body] of [
        ['GET', `/v1/policy/impact/${id}`, undefined],
        ['POST', '/v1/policy/impact', { policy_ref: ref, since }],
        ['GET', '/v1/policy/candidates', undefined],
        ['DELETE', `/v1/policy/candidates/${ref}`, undefined],
        ['PUT', '/v1/policy/shadow', { policy_ref: ref }],
      ] as const) {
        const r = await as(token, extra)(m, p, body);
        assert.ok(r.status === 401 || r.status === 403, `${m} ${p}: ${r.status} ${r.text}`);
      }
    }
    // The job ends (the tenant's slot is free again for the next test).
    let job = started;
    for (let i = 0; i < 600 && (job.json.status === 'queued' || job.json.status === 'running'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      job = await as(author)('GET', `/v1/policy/impact/${id}`);
    }
    assert.equal(job.json.status, 'done', job.text.slice(0, 500));
  });

  it("one tenant's long impact job does not hold another tenant's behind it on the shared runner", async () => {
    // 1,200 recorded decisions (six pages) for the demo tenant: copies of one recorded here.
    const since = new Date(Date.now() - 3_600_000).toISOString();
    await tdb.db.query(
      `INSERT INTO decision_inputs (recorded_at, tenant_id, audit_id, decision_id, purpose, route, allow, code, policy_version, expires_at, input)
       SELECT d.recorded_at, d.tenant_id, 9000000000 + g, d.decision_id || '-' || g, d.purpose, d.route, d.allow, d.code, d.policy_version, d.expires_at, d.input
       FROM (SELECT * FROM decision_inputs WHERE tenant_id = 'demo' ORDER BY recorded_at DESC LIMIT 1) d, generate_series(1, 1200) g`,
    );
    const file = (name: string) => readFile(join(defaultBundleDir, name));
    const bundle = {
      manifest: (await file('manifest.json')).toString('utf8'),
      registry: (await file('registry.json')).toString('utf8'),
      wasm: (await file('policy.wasm')).toString('base64'),
    };
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('atk-other', 'Other', 'KE', 'KES') ON CONFLICT DO NOTHING`,
    );
    const stranger = await putServiceToken(tdb.db, 'atk-other', 'e2e-atk-stranger-2', ['policy_author']);
    const refs: string[] = [];
    for (const token of [author, stranger]) {
      const up = await as(token)('POST', '/v1/policy/candidates', bundle);
      assert.ok(up.status === 200 || up.status === 201, up.text);
      refs.push(up.json.policy_ref as string);
    }
    const until = new Date(Date.now() + 1000).toISOString();
    const long = await as(author)('POST', '/v1/policy/impact', { policy_ref: refs[0], since, until });
    assert.equal(long.status, 202, long.text);
    const short = await as(stranger)('POST', '/v1/policy/impact', { policy_ref: refs[1], since, until });
    assert.equal(short.status, 202, short.text);
    const poll = async (token: string, id: string) => {
      let job = await as(token)('GET', `/v1/policy/impact/${id}`);
      for (let i = 0; i < 1200 && (job.json.status === 'queued' || job.json.status === 'running'); i++) {
        await new Promise((r) => setTimeout(r, 100));
        job = await as(token)('GET', `/v1/policy/impact/${id}`);
      }
      return job.json;
    };
    const [a, b] = await Promise.all([poll(author, long.json.id), poll(stranger, short.json.id)]);
    assert.equal(a.status, 'done', JSON.stringify(a).slice(0, 500));
    assert.equal(b.status, 'done', JSON.stringify(b).slice(0, 500));
    assert.ok(a.result.scanned >= 1200, `the long job replayed ${a.result.scanned}`);
    assert.ok(
      Date.parse(b.finished_at) < Date.parse(a.finished_at),
      `the other tenant's job (${b.finished_at}) ended before the long one (${a.finished_at})`,
    );
  });

  it('a tenant cannot queue impact jobs without end: past its open jobs it is refused 429 until one finishes', async () => {
    const file = (name: string) => readFile(join(defaultBundleDir, name));
    const up = await as(author)('POST', '/v1/policy/candidates', {
      manifest: (await file('manifest.json')).toString('utf8'),
      registry: (await file('registry.json')).toString('utf8'),
      wasm: (await file('policy.wasm')).toString('base64'),
    });
    assert.ok(up.status === 200 || up.status === 201, up.text);
    const ref = up.json.policy_ref as string;
    // Jobs another core holds under a lease: no runner here takes them, so they stay open.
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    for (const id of ids) {
      await tdb.db.query(
        `INSERT INTO policy_impact_jobs (id, tenant_id, candidate_ref, since, until, status, requested_by, lease_until)
         VALUES ($1, 'demo', $2, now() - interval '1 hour', now(), 'running', 'x', now() + interval '1 hour')`,
        [id, ref],
      );
    }
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const refused = await as(author)('POST', '/v1/policy/impact', { policy_ref: ref, since });
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.code, 'RATE_LIMITED');
    await tdb.db.query(`UPDATE policy_impact_jobs SET status = 'done', lease_until = NULL WHERE id = $1`, [
      ids[0],
    ]);
    const accepted = await as(author)('POST', '/v1/policy/impact', { policy_ref: ref, since });
    assert.equal(accepted.status, 202, accepted.text);
  });
});
