/**
 * The edge's real shadow thread (edge/shadow-thread.ts) holds a candidate to the bounds core's
 * impact thread does (policy/runtime/candidate-thread.ts): a signed candidate whose WASM answers
 * 62 MiB of `[[],[],…]` while loading is refused at the 4 MiB JSON bound, named in the feed's log,
 * and the thread goes on evaluating; before, its parse grew the thread past its heap bound (and
 * V8 aborted the process). A candidate that loops while loading is ended past the load deadline.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ShadowFeed } from '../../edge/shadow.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { maxJsonTextChars } from '../../policy/runtime/candidate-thread.ts';
import { wasmCandidate } from '../helpers/candidates.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { loggerInto } from '../helpers/log-lines.ts';
import { printingWasm, probeWasm } from '../helpers/probe-wasm.ts';
import { stdoutDuring } from '../helpers/stdout.ts';

describe("the edge's shadow thread bounds a candidate as core's impact thread does", () => {
  let tdb: TestDb;
  const inflatingRef = 'cand-1111111111111111';
  const loopingRef = 'cand-2222222222222222';
  const exhaustingRef = 'cand-3333333333333333';
  const devRef = 'cand-4444444444444444';
  const printingRef = 'cand-5555555555555555';
  const abortingRef = 'cand-6666666666666666';
  /** What the printing candidate prints while it loads: a log record of its own making. */
  const forged = `{"level":60,"msg":"forged by a candidate ${randomUUID()}"}`;
  const decision = (i: number, t: string) => ({
    t,
    input: { n: i },
    allow: true,
    d: `d${i}`,
    p: 'x',
    r: 'GET /x',
  });

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency)
       VALUES ('ts', 'ts', 'KE', 'KES'), ('tl', 'tl', 'KE', 'KES'), ('tx', 'tx', 'KE', 'KES'), ('tz', 'tz', 'KE', 'KES'),
              ('tm', 'tm', 'KE', 'KES'), ('ta', 'ta', 'KE', 'KES')`,
    );
    const wasms = [
      ['ts', inflatingRef, 'inflating', probeWasm('inflating')],
      ['tl', loopingRef, 'looping', probeWasm('looping')],
      // Prints 24 MiB while it loads: opa-wasm builds the text a character at a time, past the heap bound.
      ['tx', exhaustingRef, 'exhausting', printingWasm({ bytes: 24 * 2 ** 20 })],
      ['tz', devRef, 'development', await readFile(join(defaultBundleDir, 'policy.wasm'))],
      ['tm', printingRef, 'printing', printingWasm({ text: forged })],
      ['ta', abortingRef, 'aborting', printingWasm({ text: forged }, 'opa_abort')],
    ] as const;
    for (const [tenant, ref, kind, wasm] of wasms) {
      const c = await wasmCandidate(wasm, `probe-${kind}`);
      await tdb.db.query(
        `INSERT INTO policy_candidates (tenant_id, ref, policy_version, registry_version, manifest, registry, wasm, uploaded_by)
         VALUES ($1, $2, $3, 'r', $4, $5, $6, 'author')`,
        [
          tenant,
          ref,
          `probe-${kind}`,
          Buffer.from(c.manifest),
          Buffer.from(c.registry),
          Buffer.from(c.wasm, 'base64'),
        ],
      );
    }
  });
  after(() => tdb.drop());

  /** A feed of the real shadow thread on the test database, logging into `lines`. */
  const feedInto = async (lines: string[], loadTimeoutMs?: number) =>
    new ShadowFeed({
      db: tdb.db,
      databaseUrl: tdb.url,
      trustedKeys: await loadTrustedKeys(),
      log: loggerInto(lines),
      ...(loadTimeoutMs === undefined ? {} : { loadTimeoutMs }),
    });

  /** Offer the tenant's decisions and flush until `done` (the thread boots with tsx: seconds on a busy machine). */
  async function runUntil(f: ShadowFeed, tenant: string, done: () => boolean): Promise<void> {
    for (let i = 0; i < 1200 && !done(); i++) {
      if (i % 40 === 0) f.offer(decision(i, tenant));
      f.flush();
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it('refuses a candidate answering more JSON than the bound while loading, and goes on evaluating', async () => {
    const lines: string[] = [];
    const f = await feedInto(lines);
    const refused = () => lines.find((l) => l.includes('shadow candidate not loaded'));
    try {
      f.setShadows([['ts', inflatingRef]]);
      await runUntil(f, 'ts', () => refused() !== undefined && f.stats.evaluated >= 1);
      const line = JSON.parse(refused() ?? '{}') as {
        tenantId?: string;
        candidate?: string;
        reason?: string;
      };
      assert.equal(line.tenantId, 'ts');
      assert.equal(line.candidate, inflatingRef);
      assert.match(
        line.reason ?? '',
        new RegExp(
          `does not load as an OPA policy: a JSON text of \\d+ characters, past ${maxJsonTextChars}`,
        ),
      );
      assert.ok(
        f.stats.evaluated >= 1,
        'the thread answers batches (the candidate not loaded: no divergence)',
      );
      assert.deepEqual([f.stats.timeouts, f.stats.errors, f.stats.divergent], [0, 0, 0]);
    } finally {
      await f.stop();
    }
  });

  it('ends a thread whose candidate loops while loading, past the load deadline, and sets that tenant aside', async () => {
    const lines: string[] = [];
    const f = await feedInto(lines, 1_500);
    try {
      f.setShadows([['tl', loopingRef]]);
      await runUntil(f, 'tl', () => f.stats.timeouts > 0);
      assert.deepEqual([f.stats.timeouts, f.stats.suspended], [1, 1]);
      assert.ok(
        lines.some((l) => l.includes('shadow candidate did not load in time') && l.includes(loopingRef)),
        lines.join(''),
      );
    } finally {
      await f.stop();
    }
  });

  it("a candidate that ends the thread while loading (its heap bound) is set aside, and the next tenant's shadow loads and evaluates", async () => {
    // Only the thread's end can set tx aside here: its load deadline is far off.
    const lines: string[] = [];
    const f = await feedInto(lines, 600_000);
    try {
      // tx's candidate loads first (the thread loads them in order), then tz's.
      f.setShadows([
        ['tx', exhaustingRef],
        ['tz', devRef],
      ]);
      await runUntil(f, 'tz', () => f.stats.suspended === 1 && f.stats.divergent >= 1);
      assert.deepEqual(
        [f.stats.ended, f.stats.suspended],
        [1, 1],
        'the candidate that ended its thread is set aside',
      );
      assert.ok(
        lines.some((l) => l.includes('ended the shadow thread while loading') && l.includes(exhaustingRef)),
        lines.join(''),
      );
      assert.ok(
        f.stats.divergent >= 1,
        "tz's candidate loaded and evaluated (before, each new thread loaded tx's again and ended)",
      );
      assert.equal(f.stats.timeouts, 0);
    } finally {
      await f.stop();
    }
  });

  it("writes nothing a candidate prints to the edge's log stream (opa_println)", async () => {
    const f = await feedInto([]);
    try {
      const out = await stdoutDuring(async () => {
        f.setShadows([['tm', printingRef]]);
        // The probe answers no decision: an error counted is an evaluation of the loaded candidate.
        await runUntil(f, 'tm', () => f.stats.errors >= 1);
        await new Promise((r) => setTimeout(r, 500));
      });
      assert.ok(f.stats.errors >= 1, 'the candidate loaded and was evaluated');
      assert.ok(!out.includes(forged), "the candidate's line reached this process's stdout");
    } finally {
      await f.stop();
    }
  });
  it("writes nothing a candidate aborts with (opa_abort) into the edge's log", async () => {
    const lines: string[] = [];
    const f = await feedInto(lines);
    const refused = () => lines.find((l) => l.includes('shadow candidate not loaded'));
    try {
      f.setShadows([['ta', abortingRef]]);
      await runUntil(f, 'ta', () => refused() !== undefined);
      const line = JSON.parse(refused() ?? '{}') as { tenantId?: string; reason?: string };
      assert.equal(line.tenantId, 'ta');
      assert.match(line.reason ?? '', /does not load as an OPA policy: it aborted \(opa_abort\)/);
      assert.ok(
        !lines.some((l) => l.includes('forged by a candidate')),
        "the candidate's text reached the log",
      );
    } finally {
      await f.stop();
    }
  });
});
