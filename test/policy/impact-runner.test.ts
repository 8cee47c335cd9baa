import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Worker } from 'node:worker_threads';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ImpactRunner, type ImpactRunnerDeps } from '../../core/policy/impact-runner.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { loggerInto } from '../helpers/log-lines.ts';
import { wasmCandidate } from '../helpers/candidates.ts';
import { probeWasm } from '../helpers/probe-wasm.ts';

/**
 * Stand-in impact threads (CommonJS, evaluated) speaking impact-thread.ts's protocol: `onPage`
 * answers a page; `state` holds the job's result. The real thread is exercised end to end in
 * test/e2e/policy-impact*.test.ts; these reach the runner's bounds that no bundle reaches.
 */
const thread =
  (onPage: string, limits?: { maxOldGenerationSizeMb: number; maxYoungGenerationSizeMb: number }) => () =>
    new Worker(
      `const { parentPort } = require('node:worker_threads');
       let state;
       parentPort.postMessage({ type: 'ready' });
       parentPort.on('message', (m) => {
         if (m.type === 'job') { state = m.result; return parentPort.postMessage({ type: 'loaded', id: m.id }); }
         ${onPage}
       });`,
      { eval: true, ...(limits ? { resourceLimits: limits } : {}) },
    );
/** Counts the page's decisions as unchanged. */
const counting = `state.scanned += m.rows.length; state.unchanged += m.rows.length;
  parentPort.postMessage({ type: 'paged', id: m.id, result: state });`;

const candidateRef = 'cand-00000000000000a1';
/** A candidate whose files verify: the development bundle. */
const sound = 'cand-00000000000000b2';
type TestLog = ReturnType<typeof createLogger>;

describe('impact runner: bounded, failing with a reason, resumable (issue 22 item 2)', () => {
  let tdb: TestDb;
  let policies: PolicyStore;
  const log = createLogger('silent');

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('ta', 'Tenant A', 'KE', 'KES')`,
    );
    // The stand-in threads never read the files: any bytes do.
    await tdb.db.query(
      `INSERT INTO policy_candidates (tenant_id, ref, policy_version, registry_version, manifest, registry, wasm, uploaded_by)
       VALUES ('ta', $1, 'v', 'r', '\\x7b7d', '\\x7b7d', '\\x00', 'x')`,
      [candidateRef],
    );
    policies = new PolicyStore(await loadTrustedKeys());
  });
  after(async () => {
    await tdb?.drop();
  });

  const queue = async (ref = candidateRef): Promise<string> => {
    const id = randomUUID();
    await tdb.db.query(
      `INSERT INTO policy_impact_jobs (id, tenant_id, candidate_ref, since, until, requested_by)
       VALUES ($1, 'ta', $2, now() - interval '1 hour', now() + interval '1 hour', 'x')`,
      [id, ref],
    );
    return id;
  };
  const job = async (id: string) =>
    (
      await tdb.db.query<{
        status: string;
        error: string | null;
        result: { scanned: number; stopped?: string; complete: boolean };
        cursor_id: string | null;
      }>('SELECT status, error, result, cursor_id FROM policy_impact_jobs WHERE id = $1', [id])
    ).rows[0];
  const runner = (spawn: () => Worker, bounds: Partial<ImpactRunnerDeps> = {}) =>
    new ImpactRunner({ db: tdb.db, log, policies, ...bounds, worker: { ...bounds.worker, spawn } });
  const until = async (ok: () => Promise<boolean>) => {
    for (let i = 0; i < 600 && !(await ok()); i++) await new Promise((r) => setTimeout(r, 50));
  };
  const ended = (id: string) => async () => ['done', 'failed'].includes((await job(id))?.status ?? '');

  it('a worker that exhausts its heap bound fails the job naming memory; this process goes on', async () => {
    const id = await queue();
    const r = runner(
      thread('const hog = []; for (;;) hog.push(new Array(100000).fill(hog.length));', {
        maxOldGenerationSizeMb: 24,
        maxYoungGenerationSizeMb: 8,
      }),
      { worker: { heapMb: 24 } },
    );
    r.poke();
    await until(ended(id));
    await r.stop();
    const j = await job(id);
    assert.equal(j?.status, 'failed');
    assert.match(
      j?.error ?? '',
      /^the replay ran out of memory \(worker heap bound 24 MB\) after 0 decisions/,
    );
  });

  it('a job past its wall-clock budget fails naming it', async () => {
    const id = await queue();
    // Answers the job but never a page: only the budget ends it (the page deadline is far later).
    const r = runner(thread('/* never answers */'), { budgetMs: 1500, pageDeadlineMs: 600_000 });
    r.poke();
    await until(ended(id));
    await r.stop();
    const j = await job(id);
    assert.equal(j?.status, 'failed');
    assert.match(j?.error ?? '', /^the job ran past its time budget of 1.5 s after 0 decisions/);
    assert.deepEqual([j?.result.stopped, j?.result.complete], ['time_limit', false]);
  });

  it('a job whose runner stops is resumed by another from its last committed page', async () => {
    await tdb.db.query('SELECT decision_inputs_partition(now())');
    await tdb.db.query(
      `INSERT INTO decision_inputs (recorded_at, tenant_id, audit_id, decision_id, purpose, route, allow, code, policy_version, expires_at, input)
       SELECT date_trunc('second', now()), 'ta', n, 'd' || n, 'p', 'GET /x', true, 'ok', 'v', now() + interval '1 day', '{}'
       FROM generate_series(1, 450) n`,
    );
    const id = await queue();
    // The first runner's thread answers one page, then hangs; that runner stops mid-job.
    const first = runner(thread(`if (state.scanned === 0) { ${counting} }`));
    first.poke();
    await until(async () => (await job(id))?.cursor_id === '200');
    await first.stop();
    assert.equal((await job(id))?.status, 'running', 'stopping is no failure');
    // Its lease lapses (as when its core is gone); the next runner takes the job over.
    await tdb.db.query(
      `UPDATE policy_impact_jobs SET lease_until = now() - interval '1 second' WHERE id = $1`,
      [id],
    );
    const second = runner(thread(counting));
    second.poke();
    await until(ended(id));
    await second.stop();
    const j = await job(id);
    assert.equal(j?.status, 'done', j?.error ?? '');
    assert.deepEqual([j?.result.scanned, j?.result.complete], [450, true], 'each decision replayed once');
  });

  it('a candidate the real worker cannot load for a reason of its own is no failed job; one that does not verify is', async () => {
    // A candidate that verifies (the development bundle), replayed by the real impact thread whose
    // WASM runtime cannot start an instance (the injected failure: a memory bound below what one needs).
    const bundle = (f: string) => readFile(join(defaultBundleDir, f));
    await tdb.db.query(
      `INSERT INTO policy_candidates (tenant_id, ref, policy_version, registry_version, manifest, registry, wasm, uploaded_by)
       VALUES ('ta', $1, 'v', 'r', $2, $3, $4, 'x')`,
      [sound, await bundle('manifest.json'), await bundle('registry.json'), await bundle('policy.wasm')],
    );
    const lines: string[] = [];
    const watched = loggerInto(lines, 'warn');
    const realThread = (onto: TestLog) =>
      new ImpactRunner({ db: tdb.db, log: onto, policies, worker: { maxMemoryPages: 1 } });
    const id = await queue(sound);
    const r = realThread(watched);
    r.poke();
    await until(async () => lines.some((l) => l.includes('policy impact runner failed; will retry')));
    await r.stop();
    const j = await job(id);
    assert.deepEqual(
      [j?.status, j?.error],
      ['running', null],
      'not failed: taken over once its lease lapses',
    );
    assert.match(lines.join(''), /could not load the candidate: RangeError/);
    // The same worker, a candidate that does not verify: that one is the candidate's fault.
    const bad = await queue();
    const r2 = realThread(log);
    r2.poke();
    await until(ended(bad));
    await r2.stop();
    const b = await job(bad);
    assert.equal(b?.status, 'failed');
    assert.match(b?.error ?? '', /^the candidate does not verify: /);
  });
  it('a job the worker cannot load for a reason of its own, attempt after attempt, fails once the waits spend its budget', async () => {
    // The same injected failure of ours as above (the `sound` candidate stored there); a budget
    // shorter than the lease the job waits out before it is tried again.
    const id = await queue(sound);
    const r = new ImpactRunner({
      db: tdb.db,
      log,
      policies,
      budgetMs: 20_000,
      worker: { maxMemoryPages: 1 },
    });
    r.poke();
    await until(ended(id));
    await r.stop();
    const j = await job(id);
    assert.equal(j?.status, 'failed', 'before, it stayed running, taken over and failing again for ever');
    assert.equal(
      j?.error,
      'this service could not run the job within its time budget of 20 s (a failure of ours, not of the candidate); queue it again',
    );
    assert.deepEqual([j?.result.stopped, j?.result.complete], ['time_limit', false]);
  });

  it("a candidate whose WASM recurses without end while it loads fails its job as the candidate's fault, not taken over for ever", async () => {
    // Signed like a release, stored as an upload would store it; the real impact thread loads it.
    const c = await wasmCandidate(probeWasm('recursing'), 'probe-recursing');
    const ref = 'cand-00000000000000c3';
    await tdb.db.query(
      `INSERT INTO policy_candidates (tenant_id, ref, policy_version, registry_version, manifest, registry, wasm, uploaded_by)
       VALUES ('ta', $1, 'probe-recursing', 'r', $2, $3, $4, 'x')`,
      [ref, Buffer.from(c.manifest), Buffer.from(c.registry), Buffer.from(c.wasm, 'base64')],
    );
    const id = await queue(ref);
    const r = new ImpactRunner({ db: tdb.db, log, policies });
    r.poke();
    await until(ended(id));
    await r.stop();
    const j = await job(id);
    assert.equal(
      j?.status,
      'failed',
      'before, a RangeError while loading was ours: the job stayed running, taken over and failing again',
    );
    assert.match(
      j?.error ?? '',
      /^the candidate does not verify: policy\.wasm does not load as an OPA policy: .*Maximum call stack/,
    );
  });
});
