import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import { registryCandidate, tightenAccountView } from '../helpers/candidates.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, type Res } from '../helpers/http.ts';
import { journey, type Customer, type Demo, type Journey } from '../helpers/journey.ts';
import { repoRoot } from '../helpers/process.ts';

const run = promisify(execFile);

/**
 * Issue 22 through the dev gateway, nothing mocked: decisions recorded by the edge's audit thread,
 * a tightening candidate uploaded and replayed, and the recorded inputs searched for every secret
 * the test used.
 */
describe('policy impact of a candidate on recorded decisions', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let j: Journey;
  let alice: Customer;
  let author = '';
  let readonly = '';
  const since = new Date(Date.now() - 1000).toISOString();

  const as =
    (token: string) =>
    (method: string, path: string, json?: unknown): Promise<Res> =>
      call(gw, method, path, {
        ...(json !== undefined ? { json } : {}),
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID() },
      });

  const inputCount = async (route: string) =>
    Number(
      (
        await tdb.db.query<{ n: string }>(
          `SELECT count(*) AS n FROM decision_inputs WHERE tenant_id = 'demo' AND route = $1`,
          [route],
        )
      ).rows[0]?.n,
    );

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-impact-'));
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
    author = await putServiceToken(tdb.db, 'demo', 'e2e-policy-author', ['policy_author']);
    readonly = await putServiceToken(tdb.db, 'demo', 'e2e-readonly', ['readonly']);
    alice = await j.signUp('+254711300001');
    for (let i = 0; i < 3; i++) {
      const r = await call(gw, 'GET', '/v1/accounts', {
        headers: { authorization: `Bearer ${alice.access}`, 'x-device-id': alice.device },
      });
      assert.equal(r.status, 200, r.text);
    }
    // The audit thread records inputs after each batch commits: wait for the reads to land.
    for (let i = 0; i < 200 && (await inputCount('GET /v1/accounts')) < 4; i++)
      await new Promise((r) => setTimeout(r, 25));
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('records the policy input of decisions, linked to their audit records, with no token, PIN or OTP in them', async () => {
    assert.ok((await inputCount('GET /v1/accounts')) >= 4, 'sign-up read once, the test three times');
    const { rows } = await tdb.db.query<{ input: unknown; linked: boolean }>(
      `SELECT i.input, a.decision->>'decision_id' = i.decision_id AS linked FROM decision_inputs i JOIN audit_log a ON a.id = i.audit_id`,
    );
    assert.ok(rows.length > 0 && rows.every((r) => r.linked), 'every input names its audit record');
    const text = JSON.stringify(rows.map((r) => r.input));
    const codes = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { code?: string }).code)
      .filter((c): c is string => Boolean(c));
    assert.ok(codes.length >= 2, 'the sign-up and its step-up each sent an OTP');
    for (const secret of [alice.access, author, readonly, ...codes.map((c) => `"${c}"`), '"4826"'])
      assert.ok(!text.includes(secret), 'a secret of the test is in a recorded input');
    for (const personal of [alice.id, alice.phone, alice.wallet])
      assert.ok(personal && !text.includes(personal), 'personal identifiers are pseudonymised');
    assert.ok(!/"(pin|otp|token|access_token)"\s*:/.test(text));
    const metrics = await call(gw, 'GET', '/v1/metrics');
    const recorded = /edge_decision_inputs\{stat="recorded"\} (\d+)/.exec(metrics.text);
    assert.ok(recorded && Number(recorded[1]) > 0, 'recording shows in metrics');
  });

  it('a tightening candidate shows exactly the expected allow→deny flips, grouped, with both traces', async () => {
    const up = await as(author)(
      'POST',
      '/v1/policy/candidates',
      await registryCandidate(tightenAccountView, '2026-11-25T00:00:00Z'),
    );
    assert.equal(up.status, 201, up.text);
    assert.match(up.json.policy_ref, /^cand-[0-9a-f]{16}$/);
    const again = await as(author)(
      'POST',
      '/v1/policy/candidates',
      await registryCandidate(tightenAccountView, '2026-11-25T00:00:00Z'),
    );
    assert.equal(again.status, 200, 'the same signed bundle is the same candidate');
    assert.equal(again.json.policy_ref, up.json.policy_ref);

    const until = new Date().toISOString();
    const started = await as(author)('POST', '/v1/policy/impact', {
      policy_ref: up.json.policy_ref,
      since,
      until,
    });
    assert.equal(started.status, 202, started.text);
    assert.equal(started.headers.location, `/v1/policy/impact/${started.json.id}`);
    let job = started;
    for (let i = 0; i < 400 && (job.json.status === 'queued' || job.json.status === 'running'); i++) {
      await new Promise((r) => setTimeout(r, 50));
      job = await as(author)('GET', `/v1/policy/impact/${started.json.id}`);
      assert.equal(job.status, 200, job.text);
    }
    assert.equal(job.json.status, 'done', job.text);
    const r = job.json.result;
    const expected = await tdb.db.query<{ flips: string; total: string }>(
      `SELECT count(*) FILTER (WHERE purpose = 'customer.account.view' AND allow) AS flips, count(*) AS total
       FROM decision_inputs WHERE tenant_id = 'demo' AND recorded_at >= $1 AND recorded_at < $2`,
      [since, until],
    );
    const flips = Number(expected.rows[0]?.flips);
    assert.ok(flips >= 4);
    assert.equal(r.complete, true);
    assert.equal(r.scanned, Number(expected.rows[0]?.total));
    assert.equal(r.allow_to_deny, flips, 'every allowed balance read, and nothing else');
    assert.equal(r.deny_to_allow, 0);
    assert.equal(r.errors, 0);
    assert.equal(r.drift, 0, 'the recorded policy replays every recorded decision as it was made');
    assert.equal(r.unchanged, r.scanned - flips);
    const flipGroups = r.groups.filter((g: { change: string }) => g.change !== 'unchanged');
    assert.ok(
      flipGroups.every(
        (g: { change: string; purpose: string; reason: string }) =>
          g.change === 'allow_to_deny' &&
          g.purpose === 'customer.account.view' &&
          g.reason.split(',').includes('min_aal'),
      ),
      JSON.stringify(flipGroups),
    );
    assert.equal(
      flipGroups.find((g: { route: string }) => g.route === 'GET /v1/accounts')?.count,
      await inputCount('GET /v1/accounts'),
    );
    const sample = r.samples[0];
    assert.equal(sample.change, 'allow_to_deny');
    assert.equal(sample.baseline.allow, true, 'the recorded policy replayed allows');
    assert.equal(sample.candidate.allow, false);
    assert.ok(
      sample.candidate.reasons.some((x: { check: string; ok: boolean }) => x.check === 'min_aal' && !x.ok),
    );
    assert.ok(sample.baseline.reasons.every((x: { ok: boolean }) => x.ok));
    assert.match(sample.input.subject.id, /^p_/, 'samples show pseudonyms');
    // The upload and the replay are audited naming who asked.
    const audited = await tdb.db.query<{ action: string; actor: { id: string } }>(
      `SELECT action, actor FROM audit_log WHERE tenant_id = 'demo' AND action IN ('policy.candidate_upload', 'policy.impact_run') ORDER BY id`,
    );
    assert.deepEqual(
      audited.rows.map((x) => x.action),
      ['policy.candidate_upload', 'policy.impact_run'],
    );
    assert.ok(
      audited.rows.every((x) => x.actor.id.startsWith('service-token:')),
      JSON.stringify(audited.rows),
    );
  });

  it('a shadow candidate sees every live decision without changing one; divergences are counted and sampled', async () => {
    const up = await as(author)(
      'POST',
      '/v1/policy/candidates',
      await registryCandidate(tightenAccountView, '2026-11-25T00:00:00Z'),
    );
    const set = await as(author)('PUT', '/v1/policy/shadow', { policy_ref: up.json.policy_ref });
    assert.equal(set.status, 200, set.text);
    const divergent = async () =>
      Number(
        /edge_policy_shadow\{stat="divergent"\} (\d+)/.exec(
          (await call(gw, 'GET', '/v1/metrics')).text,
        )?.[1] ?? 0,
      );
    // The edge re-reads its shadows every 2 s: read balances until the shadow has judged some.
    for (let i = 0; i < 100 && (await divergent()) === 0; i++) {
      const r = await call(gw, 'GET', '/v1/accounts', {
        headers: { authorization: `Bearer ${alice.access}`, 'x-device-id': alice.device },
      });
      assert.equal(r.status, 200, 'the live answer comes from the live policy, whatever the shadow says');
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok((await divergent()) > 0, 'the tightened shadow disagrees with the live allows');
    let view = await as(author)('GET', '/v1/policy/shadow');
    for (let i = 0; i < 100 && view.json.divergences.length === 0; i++) {
      await new Promise((res) => setTimeout(res, 50));
      view = await as(author)('GET', '/v1/policy/shadow');
    }
    assert.equal(view.status, 200, view.text);
    assert.equal(view.json.shadow.policy_ref, up.json.policy_ref);
    const d = view.json.divergences[0];
    assert.deepEqual(
      [d.purpose, d.route, d.live_allow, d.shadow_allow],
      ['customer.account.view', 'GET /v1/accounts', true, false],
    );
    assert.match(d.input.subject.id, /^p_/);
    assert.ok(!JSON.stringify(view.json).includes(alice.access));
    assert.equal((await as(author)('DELETE', '/v1/policy/shadow')).status, 204);
    assert.equal((await as(author)('GET', '/v1/policy/shadow')).json.shadow, null);
  });

  it('the author CLI uploads a signed bundle, replays the window and prints the impact table', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'e2e-impact-cli-'));
    try {
      const files = await registryCandidate(tightenAccountView, '2026-11-27T00:00:00Z');
      await writeFile(join(dir, 'manifest.json'), files.manifest);
      await writeFile(join(dir, 'registry.json'), files.registry);
      await writeFile(join(dir, 'policy.wasm'), Buffer.from(files.wasm, 'base64'));
      await writeFile(join(dir, 'token'), author, { mode: 0o600 });
      const { stdout } = await run(
        process.execPath,
        [
          '--import',
          'tsx',
          'policy/impact.ts',
          '--candidate',
          dir,
          '--no-build',
          '--since',
          '1h',
          '--gateway',
          gw,
          '--token-file',
          join(dir, 'token'),
        ],
        { cwd: fileURLToPath(repoRoot) },
      );
      assert.match(stdout, /allow→deny \d+/);
      assert.match(stdout, /allow→deny\s+\d+\s+customer\.account\.view\s+GET \/v1\/accounts\s+.*min_aal/);
      assert.ok(!stdout.includes(author));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a candidate whose registry no longer matches its signature, other roles, and unknown jobs', async () => {
    const forged = await registryCandidate(tightenAccountView, '2026-11-26T00:00:00Z', false);
    const bad = await as(author)('POST', '/v1/policy/candidates', forged);
    assert.equal(bad.status, 422, bad.text);
    assert.equal(bad.json.code, 'BUNDLE_INVALID');
    assert.equal(
      (await as(author)('POST', '/v1/policy/candidates', { manifest: '{}', registry: '{}', wasm: 'AAAA' }))
        .json.code,
      'BUNDLE_INVALID',
    );
    const anonymous = await call(gw, 'POST', '/v1/policy/impact', {
      json: { policy_ref: 'cand-0000000000000000', since },
    });
    assert.equal(anonymous.status, 401, 'never a public action');
    const refused = await as(readonly)('POST', '/v1/policy/impact', {
      policy_ref: 'cand-0000000000000000',
      since,
    });
    assert.equal(refused.status, 403, refused.text);
    assert.equal(
      (await as(author)('POST', '/v1/policy/impact', { policy_ref: 'cand-0000000000000000', since })).json
        .code,
      'CANDIDATE_NOT_FOUND',
    );
    assert.equal((await as(author)('GET', `/v1/policy/impact/${randomUUID()}`)).status, 404);
    assert.equal(
      (
        await as(author)('POST', '/v1/policy/impact', {
          policy_ref: 'cand-0000000000000000',
          since: 'yesterday',
        })
      ).status,
      400,
    );
  });
});
