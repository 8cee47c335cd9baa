/**
 * The edge's real shadow thread (edge/shadow-thread.ts) holds a candidate to the bounds core's
 * impact thread does (policy/runtime/candidate-thread.ts): a signed candidate whose WASM answers
 * 62 MiB of `[[],[],…]` while loading is refused at the 4 MiB JSON bound, named in the feed's log,
 * and the thread goes on evaluating; before, its parse grew the thread past its heap bound.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ShadowFeed } from '../../edge/shadow.ts';
import { loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { maxJsonTextChars } from '../../policy/runtime/candidate-thread.ts';
import { wasmCandidate } from '../helpers/candidates.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { loggerInto } from '../helpers/log-lines.ts';
import { probeWasm } from '../helpers/probe-wasm.ts';

describe("the edge's shadow thread bounds a candidate's JSON as core's impact thread does", () => {
  let tdb: TestDb;
  const ref = 'cand-1111111111111111';

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('ts', 'ts', 'KE', 'KES')`,
    );
    const c = await wasmCandidate(probeWasm('inflating'), 'probe-inflating');
    await tdb.db.query(
      `INSERT INTO policy_candidates (tenant_id, ref, policy_version, registry_version, manifest, registry, wasm, uploaded_by)
       VALUES ('ts', $1, 'probe-inflating', 'r', $2, $3, $4, 'author')`,
      [ref, Buffer.from(c.manifest), Buffer.from(c.registry), Buffer.from(c.wasm, 'base64')],
    );
  });
  after(() => tdb.drop());

  it('refuses a candidate answering more JSON than the bound while loading, and goes on evaluating', async () => {
    const lines: string[] = [];
    const f = new ShadowFeed({
      db: tdb.db,
      databaseUrl: tdb.url,
      trustedKeys: await loadTrustedKeys(),
      log: loggerInto(lines),
    });
    const refused = () => lines.find((l) => l.includes('shadow candidate not loaded'));
    try {
      f.setShadows([['ts', ref]]);
      const decision = (i: number) => ({
        t: 'ts',
        input: { n: i },
        allow: true,
        d: `d${i}`,
        p: 'x',
        r: 'GET /x',
      });
      f.offer(decision(0));
      // The thread boots (tsx, on a busy machine: seconds), reads the candidate and loads it.
      for (let i = 0; i < 1200 && !(refused() && f.stats.evaluated >= 1); i++) {
        f.flush();
        if (i % 40 === 0) f.offer(decision(i + 1));
        await new Promise((r) => setTimeout(r, 50));
      }
      const line = JSON.parse(refused() ?? '{}') as {
        tenantId?: string;
        candidate?: string;
        reason?: string;
      };
      assert.equal(line.tenantId, 'ts');
      assert.equal(line.candidate, ref);
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
});
