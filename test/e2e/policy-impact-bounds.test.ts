import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { maxCandidatesPerTenant } from '../../core/policy/candidates.ts';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import {
  type CandidateUpload,
  regoCandidate,
  registryCandidate,
  tightenAccountView,
} from '../helpers/candidates.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo } from '../helpers/journey.ts';

/** A well-formed answer for both entry points, once `ok` holds. */
const answering = (ok: string) => `package payments.authz

verdict := {
	"allow": true, "status": 200, "code": "ok", "message": "ok", "step_up": false,
	"obligations": {}, "policy_version": "x", "registry_version": "x",
} if ${ok}

decision := object.union(verdict, {"reasons": []})
`;

/**
 * Never ends: three nested scans of a range built once, compared without building a value, so
 * the evaluation neither finishes nor grows its memory.
 */
const loops = `${answering('spin')}
r := numbers.range(1, 100000)

spin if {
	some i in r
	some j in r
	some k in r
	i == j
	j == k
	k != i
}
`;

/** Builds a billion-number array: its memory grows until the instance's bound stops it. */
const allocates = `${answering('grows')}
grows if count(numbers.range(1, 1000000000)) > 0
`;

/**
 * Issue 22's bounds through the dev gateway, nothing mocked: candidates that loop or allocate
 * without end, replayed on core's impact worker and shadowed on the edge's thread, while core and
 * the edge go on answering; and the per-tenant cap on stored candidates.
 */
describe('policy impact and shadow stay bounded; candidates are capped per tenant', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let alice: Customer;
  let author = '';
  let readonly = '';
  const since = new Date(Date.now() - 1000).toISOString();
  /** The end of the decisions recorded before the tests (the sign-up and three balance reads). */
  let recordedUntil = '';
  const candidates: Record<'loops' | 'allocates', CandidateUpload | undefined> = {
    loops: undefined,
    allocates: undefined,
  };

  const as =
    (token: string) =>
    (method: string, path: string, json?: unknown): Promise<Res> =>
      call(gw, method, path, {
        ...(json !== undefined ? { json } : {}),
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID() },
      });
  const readBalances = () =>
    call(gw, 'GET', '/v1/accounts', {
      headers: { authorization: `Bearer ${alice.access}`, 'x-device-id': alice.device },
    });
  const upload = async (c: CandidateUpload): Promise<string> => {
    const up = await as(author)('POST', '/v1/policy/candidates', c);
    assert.ok(up.status === 201 || up.status === 200, up.text);
    return up.json.policy_ref as string;
  };
  const recorded = async () =>
    Number(
      (
        await tdb.db.query<{ n: string }>(
          `SELECT count(*) AS n FROM decision_inputs WHERE tenant_id = 'demo' AND route = 'GET /v1/accounts'`,
        )
      ).rows[0]?.n,
    );
  /** Start a job over the decisions recorded before the tests and poll it to its end; `whileRunning` runs between polls while it runs. */
  const impact = async (ref: string, whileRunning?: () => Promise<void>) => {
    const started = await as(author)('POST', '/v1/policy/impact', {
      policy_ref: ref,
      since,
      until: recordedUntil,
    });
    assert.equal(started.status, 202, started.text);
    let job = started;
    for (let i = 0; i < 2000 && (job.json.status === 'queued' || job.json.status === 'running'); i++) {
      if (job.json.status === 'running') await whileRunning?.();
      await new Promise((r) => setTimeout(r, 50));
      job = await as(author)('GET', `/v1/policy/impact/${started.json.id}`);
      assert.equal(job.status, 200, job.text);
    }
    return job.json;
  };
  const shadowStat = async (stat: string) =>
    Number(
      new RegExp(`edge_policy_shadow\\{stat="${stat}"\\} (\\d+)`).exec(
        (await call(gw, 'GET', '/v1/metrics')).text,
      )?.[1] ?? 0,
    );

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-impact-bounds-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    // A page's deadline of 8 s instead of 20: the looping candidate burns a core until it passes.
    stack = await startStack(config, {
      checkTimeoutMs: 3000,
      checkResponses: true,
      impactPageDeadlineMs: 8000,
    });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    const demo = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')) as Demo;
    author = await putServiceToken(tdb.db, 'demo', 'e2e-bounds-author', ['policy_author']);
    readonly = await putServiceToken(tdb.db, 'demo', 'e2e-bounds-readonly', ['readonly']);
    alice = await journey(gw, dataDir, tdb.db, demo).signUp('+254711300451');
    for (let i = 0; i < 3; i++) assert.equal((await readBalances()).status, 200);
    for (let i = 0; i < 200 && (await recorded()) < 4; i++) await new Promise((r) => setTimeout(r, 25));
    recordedUntil = new Date().toISOString();
    candidates.loops = await regoCandidate(loops, 'test-loops');
    candidates.allocates = await regoCandidate(allocates, 'test-allocates');
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('a candidate that loops fails its impact job with the reason, while core goes on answering', async () => {
    const ref = await upload(candidates.loops as CandidateUpload);
    let answeredWhileRunning = 0;
    const job = await impact(ref, async () => {
      const r = await readBalances();
      assert.equal(r.status, 200, r.text);
      answeredWhileRunning += 1;
    });
    assert.equal(job.status, 'failed', JSON.stringify(job));
    assert.match(
      job.error,
      /^a page of 200 decisions was not replayed within 8 s \(does the candidate loop\?\)/,
    );
    assert.equal(job.result.complete, false);
    assert.ok(answeredWhileRunning > 0, 'core answered requests while the job ran');
  });

  it('a candidate that allocates without end fails each evaluation, counted as an error; the job ends', async () => {
    const ref = await upload(candidates.allocates as CandidateUpload);
    const job = await impact(ref);
    assert.equal(job.status, 'done', JSON.stringify(job));
    assert.ok(job.result.scanned >= 4);
    assert.equal(job.result.errors, job.result.scanned, 'no evaluation produced a decision');
    assert.equal(job.result.unchanged + job.result.allow_to_deny + job.result.deny_to_allow, 0);
  });

  it('after those, a tightening candidate still shows exactly the expected flips on a new worker', async () => {
    const ref = await upload(await registryCandidate(tightenAccountView, '2026-12-01T00:00:00Z'));
    const job = await impact(ref);
    assert.equal(job.status, 'done', JSON.stringify(job));
    const expected = await tdb.db.query<{ flips: string; total: string }>(
      `SELECT count(*) FILTER (WHERE purpose = 'customer.account.view' AND allow) AS flips, count(*) AS total
       FROM decision_inputs WHERE tenant_id = 'demo' AND recorded_at >= $1 AND recorded_at < $2`,
      [job.since, job.until],
    );
    assert.equal(job.result.complete, true);
    assert.equal(job.result.scanned, Number(expected.rows[0]?.total));
    assert.equal(job.result.allow_to_deny, Number(expected.rows[0]?.flips));
    assert.ok(job.result.allow_to_deny >= 4);
    assert.deepEqual([job.result.deny_to_allow, job.result.errors], [0, 0]);
  });

  it('a shadow that loops or allocates leaves every live answer unchanged and counts timeouts and errors', async () => {
    // An allocating shadow fails by running out of its heap, or, on a loaded machine, by running
    // out of its time first: either counts, neither changes a live answer.
    const failed = async (stats: readonly string[]) =>
      (await Promise.all(stats.map(shadowStat))).reduce((a, b) => a + b, 0);
    for (const [name, stat] of [
      ['loops', ['timeouts']],
      ['allocates', ['errors', 'timeouts']],
    ] as const) {
      const ref = await upload(candidates[name] as CandidateUpload);
      const set = await as(author)('PUT', '/v1/policy/shadow', { policy_ref: ref });
      assert.equal(set.status, 200, set.text);
      const before = await failed(stat);
      // The edge re-reads its shadows every 2 s: read balances until the shadow has been tried.
      for (let i = 0; i < 300 && (await failed(stat)) === before; i++) {
        const r = await readBalances();
        assert.equal(r.status, 200, 'the live answer comes from the live policy, whatever the shadow does');
        await new Promise((res) => setTimeout(res, 100));
      }
      assert.ok(
        (await failed(stat)) > before,
        `the ${name} shadow shows in edge_policy_shadow{stat="${stat.join('" or "')}"}`,
      );
    }
    assert.equal((await readBalances()).status, 200);
    assert.equal((await as(author)('DELETE', '/v1/policy/shadow')).status, 204);
  });

  it(`a tenant stores at most ${maxCandidatesPerTenant} candidates; deleting one frees a slot, never the shadow`, async () => {
    const list = async () => {
      const r = await as(author)('GET', '/v1/policy/candidates');
      assert.equal(r.status, 200, r.text);
      return r.json.candidates as { policy_ref: string }[];
    };
    const loopsRef = await upload(candidates.loops as CandidateUpload);
    for (let n = (await list()).length; n < maxCandidatesPerTenant; n++)
      await upload(
        await registryCandidate(() => undefined, `2027-01-01T00:00:${String(n).padStart(2, '0')}Z`),
      );
    assert.equal((await list()).length, maxCandidatesPerTenant);
    const extra = await registryCandidate(() => undefined, '2027-02-01T00:00:00Z');
    const refused = await as(author)('POST', '/v1/policy/candidates', extra);
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.json.code, 'CANDIDATE_LIMIT');
    const again = await as(author)('POST', '/v1/policy/candidates', candidates.loops);
    assert.equal(again.status, 200, 'a candidate already stored is not a new one');

    assert.equal((await as(author)('PUT', '/v1/policy/shadow', { policy_ref: loopsRef })).status, 200);
    const inUse = await as(author)('DELETE', `/v1/policy/candidates/${loopsRef}`);
    assert.equal(inUse.status, 409, inUse.text);
    assert.equal(inUse.json.code, 'CANDIDATE_IN_USE');
    assert.equal((await as(author)('DELETE', '/v1/policy/shadow')).status, 204);
    assert.equal((await as(readonly)('DELETE', `/v1/policy/candidates/${loopsRef}`)).status, 403);
    assert.equal((await as(author)('DELETE', `/v1/policy/candidates/${loopsRef}`)).status, 204);
    assert.ok(!(await list()).some((c) => c.policy_ref === loopsRef));
    const gone = await as(author)('DELETE', `/v1/policy/candidates/${loopsRef}`);
    assert.equal(gone.json.code, 'CANDIDATE_NOT_FOUND', gone.text);
    assert.equal((await as(author)('POST', '/v1/policy/candidates', extra)).status, 201, 'the slot is free');

    // The failed job of the deleted candidate keeps its result; the deletion is audited.
    const jobs = await tdb.db.query<{ id: string }>(
      'SELECT id FROM policy_impact_jobs WHERE candidate_ref = $1',
      [loopsRef],
    );
    assert.ok(jobs.rows[0]);
    const old = await as(author)('GET', `/v1/policy/impact/${jobs.rows[0].id}`);
    assert.equal(old.json.status, 'failed', old.text);
    const audited = await tdb.db.query<{ actor: { id: string }; target: { id: string } }>(
      `SELECT actor, target FROM audit_log WHERE tenant_id = 'demo' AND action = 'policy.candidate_delete'`,
    );
    assert.deepEqual(
      audited.rows.map((r) => r.target.id),
      [loopsRef],
    );
    assert.match(audited.rows[0]?.actor.id ?? '', /^service-token:/);
  });
});
