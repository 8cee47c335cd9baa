/**
 * Policy tooling blames a bundle only for the bundle's faults (core/policy/faults.ts). A candidate
 * upload whose verification fails for a reason of ours (the WASM runtime that cannot start, an
 * I/O error: injected into the verifier) is 503 with Retry-After and logged, a defect of our code
 * 500 without detail, and only a bundle that does not verify 422. Simulate's `policy_ref` whose
 * revision the bundle source fails to serve is 503, not an unknown ref (404). A WASM declaring
 * linear memory of its own (allocated past the bound of the one it is given) is refused unrun;
 * a tenant loads one candidate at a time (429 past it), so it cannot queue ahead of another tenant.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildCore } from '../../core/app.ts';
import { candidateLoadMs } from '../../policy/runtime/candidate-thread.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import {
  type BundleFiles,
  defaultBundleDir,
  loadTrustedKeys,
  type CheckedBundle,
} from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { wasmCandidate } from '../helpers/candidates.ts';
import { probeWasm } from '../helpers/probe-wasm.ts';
import { parsedTexts } from '../helpers/json-parses.ts';
import { detachedRespellings } from '../helpers/respell.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { loggerInto } from '../helpers/log-lines.ts';
import { staffViaEdge, testEdgeSecrets } from '../helpers/edge-auth.ts';
import { call, serve } from '../helpers/http.ts';

/** A policy store whose verifier fails as told (the injected failure), else verifies. */
class FaultyStore extends PolicyStore {
  fault: unknown;
  override verify(files: BundleFiles): Promise<CheckedBundle> {
    return this.fault === undefined ? super.verify(files) : Promise.reject(this.fault);
  }
}

describe('policy tooling: 422 for the bundle, 503 or 500 for us', () => {
  let tdb: TestDb;
  let origin: string;
  let closeCore: () => Promise<void>;
  let source: Server;
  let store: FaultyStore;
  const lines: string[] = [];

  before(async () => {
    // The bundle source: the development bundle, one revision it fails to serve (503), none else.
    source = createServer(async (req, res) => {
      const path = req.url ?? '/';
      if (path.startsWith('/revisions/broken-ref/')) {
        res.writeHead(503).end();
        return;
      }
      try {
        res.end(await readFile(join(defaultBundleDir, path.replace(/^\//, ''))));
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((r) => source.listen(0, '127.0.0.1', r));
    store = new FaultyStore(await loadTrustedKeys());
    await store.load(`http://127.0.0.1:${(source.address() as { port: number }).port}/`);
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('tp', 'tp', 'KE', 'KES'), ('tq', 'tq', 'KE', 'KES')`,
    );
    const log = loggerInto(lines);
    const core = buildCore({
      db: tdb.db,
      log,
      metrics: createMetrics(),
      build: readBuildInfo(),
      keys: new KeyStore(tdb.db, randomBytes(32)),
      edgeSecrets: testEdgeSecrets,
      checkResponses: true,
      policies: store,
    });
    const s = await serve(core.server);
    origin = s.origin;
    closeCore = s.close;
  });
  after(async () => {
    await closeCore();
    source.close();
    await tdb.drop();
  });

  const as =
    (role: string, tenant = 'tp') =>
    (method: string, path: string, json?: unknown) =>
      call(origin, method, path, {
        ...(json === undefined ? {} : { json }),
        headers: staffViaEdge(role, tenant),
      });
  const upload = (body: unknown) => as('policy_author')('POST', '/v1/policy/candidates', body);

  it('a candidate that does not verify, or whose WASM does not load, is 422 BUNDLE_INVALID', async () => {
    const unsigned = await upload({ manifest: '{}', registry: '{}', wasm: 'AAAA' });
    assert.equal(unsigned.status, 422, unsigned.text);
    assert.equal(unsigned.json.code, 'BUNDLE_INVALID');
    // A signed candidate whose manifest signature is spelled otherwise (the same bytes): refused as unsigned.
    const sound = await wasmCandidate(probeWasm('sound'), 'respelled');
    const manifest = JSON.parse(sound.manifest) as { signature: string };
    for (const [name, other] of detachedRespellings(manifest.signature)) {
      const r = await upload({ ...sound, manifest: JSON.stringify({ ...manifest, signature: other }) });
      assert.equal(r.status, 422, `${name}: ${r.text}`);
      assert.equal(r.json.code, 'BUNDLE_INVALID');
      assert.match(r.json.message, /bundle manifest signature does not verify/);
    }
    const broken = await upload(await wasmCandidate(Buffer.from('not a wasm module'), 'broken-wasm'));
    assert.equal(broken.status, 422, broken.text);
    assert.match(broken.json.message, /policy\.wasm does not load as an OPA policy/);
  });

  it('a body that is not one object of three strings is refused 400 before its megabytes are parsed', async () => {
    const body = (inner: string) => Buffer.from(`{"manifest":${inner},"registry":"{}","wasm":"AAAA"}`);
    const bodies = [
      ['nested as deep as it goes', Buffer.from(`${'['.repeat(2_650_000)}${']'.repeat(2_650_000)}`)],
      ['a member nested as deep as it goes', body(`${'['.repeat(2_600_000)}${']'.repeat(2_600_000)}`)],
      ['a member of a million empty arrays', body(`[${'[],'.repeat(1_000_000)}[]]`)],
      ['half a million members', body(`"{}"${',"m":""'.repeat(500_000)}`)],
    ] as const;
    const parsed = await parsedTexts(async () => {
      for (const [name, raw] of bodies) {
        const r = await call(origin, 'POST', '/v1/policy/candidates', {
          body: raw,
          headers: { ...staffViaEdge('policy_author', 'tp'), 'content-type': 'application/json' },
        });
        assert.equal(r.status, 400, `${name}: ${r.text}`);
        assert.equal(r.json.code, 'VALIDATION_FAILED', name);
      }
    });
    assert.deepEqual(
      parsed.filter((n) => n > 100_000),
      [],
      'no body was parsed (the 5 MB nested one built 155 MB of heap to be refused)',
    );
  });

  it("a WASM that recurses without end or answers text that is not JSON while loading is the bundle's fault: 422, not 503 or 500", async () => {
    for (const [kind, why] of [
      ['recursing', /Maximum call stack/],
      ['notJson', /not valid JSON/],
    ] as const) {
      const r = await upload(await wasmCandidate(probeWasm(kind), `probe-${kind}`));
      assert.equal(r.status, 422, `${kind}: ${r.text}`);
      assert.equal(r.json.code, 'BUNDLE_INVALID');
      assert.match(r.json.message, /policy\.wasm does not load as an OPA policy/);
      assert.match(r.json.message, why);
      assert.equal(r.headers['retry-after'], undefined, 'nothing to retry');
    }
    const sound = await upload(await wasmCandidate(probeWasm('sound'), 'probe-sound'));
    assert.equal(sound.status, 201, `the same module answering JSON loads: ${sound.text}`);
  });

  it("a WASM that loops while loading is refused past the load deadline, off core's event loop: core goes on answering", async () => {
    for (const kind of ['looping', 'pointingOutside'] as const) {
      const started = Date.now();
      const pending = upload(await wasmCandidate(probeWasm(kind), `probe-${kind}`));
      // While the candidate loads, core answers others (before, it loaded on core's event loop, for ever).
      const meanwhile = await call(origin, 'GET', '/v1/health');
      assert.equal(meanwhile.status, 200);
      assert.ok(Date.now() - started < candidateLoadMs, `${kind}: answered while the candidate loads`);
      const r = await pending;
      assert.equal(r.status, 422, `${kind}: ${r.text}`);
      assert.equal(r.json.code, 'BUNDLE_INVALID');
      assert.match(
        r.json.message,
        new RegExp(`policy\\.wasm did not load within ${candidateLoadMs / 1000} s`),
      );
    }
    const listed = await as('policy_author')('GET', '/v1/policy/candidates');
    assert.ok(
      !listed.text.includes('probe-looping') && !listed.text.includes('probe-pointingOutside'),
      'neither is stored',
    );
  });

  it("one tenant's concurrent uploads do not queue ahead of another tenant's: one load at a time per tenant, the rest 429 with Retry-After", async () => {
    const looping = await Promise.all(
      [1, 2, 3].map((i) => wasmCandidate(probeWasm('looping'), `probe-loop-${i}`)),
    );
    const theirs = await wasmCandidate(probeWasm('sound'), 'probe-tq');
    const ours = looping.map((c) => upload(c));
    await new Promise((r) => setTimeout(r, 200));
    const started = Date.now();
    const other = await as('policy_author', 'tq')('POST', '/v1/policy/candidates', theirs);
    const waited = Date.now() - started;
    assert.equal(other.status, 201, other.text);
    // Behind one load of tp's at most, then its own; before, behind all three of tp's (15 s).
    assert.ok(waited < 2 * candidateLoadMs, `tq waited ${waited} ms behind tp's loads`);
    const answers = await Promise.all(ours);
    assert.deepEqual(
      answers.map((r) => r.status).sort(),
      [422, 429, 429],
      answers.map((r) => r.text).join('\n'),
    );
    for (const r of answers.filter((x) => x.status === 429)) {
      assert.equal(r.json.code, 'RATE_LIMITED');
      assert.equal(r.headers['retry-after'], String(candidateLoadMs / 1000));
    }
    const next = await upload(await wasmCandidate(probeWasm('sound'), 'probe-tp-after'));
    assert.equal(next.status, 201, `once its load is answered, tp's next upload is taken: ${next.text}`);
  });

  it("a WASM answering more JSON than the worker's heap holds parsed is refused 422 at once, no thread left running", async () => {
    const started = Date.now();
    const r = await upload(await wasmCandidate(probeWasm('inflating'), 'probe-inflating'));
    assert.equal(r.status, 422, r.text);
    assert.match(
      r.json.message,
      /policy\.wasm does not load as an OPA policy: a JSON text of \d+ characters/,
    );
    assert.ok(Date.now() - started < candidateLoadMs, 'answered before the load deadline');
    // Before, its 62 MiB parsed into some 900 MB of heap: past the bound the worker was told to
    // stop, which a JSON.parse does not heed; it went on in core's process, a core's worth of CPU
    // in GC for minutes, and V8 aborted the process when the thread was torn down.
    const cpu = process.cpuUsage();
    await new Promise((done) => setTimeout(done, 2_000));
    const spent = process.cpuUsage(cpu);
    const ms = (spent.user + spent.system) / 1000;
    assert.ok(ms < 700, `core spent ${Math.round(ms)} ms of CPU in the 2 s after the answer`);
  });

  it("a WASM declaring its own linear memory (past the loader's bound) is refused 422 before any of it runs", async () => {
    let peak = 0;
    const base = process.memoryUsage().rss;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 5);
    try {
      const r = await upload(await wasmCandidate(probeWasm('filling', 'own'), 'probe-own-memory'));
      assert.equal(r.status, 422, r.text);
      assert.equal(r.json.code, 'BUNDLE_INVALID');
      assert.match(r.json.message, /policy\.wasm declares its own memory/);
    } finally {
      clearInterval(sampler);
    }
    // Before, it was instantiated with 1.5 GiB of memory of its own in core's process, and filled it.
    const rose = Math.round((peak - base) / 2 ** 20);
    assert.ok(rose < 512, `core's memory rose by ${rose} MiB`);
  });

  it('our failure while verifying a candidate is 503 with Retry-After, logged, never 422', async () => {
    const candidate = await wasmCandidate(await readFile(join(defaultBundleDir, 'policy.wasm')), 'fine');
    for (const fault of [
      new RangeError('WebAssembly.Memory(): could not allocate memory'),
      Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' }),
    ]) {
      store.fault = fault;
      const r = await upload(candidate);
      assert.equal(r.status, 503, `${fault.message}: ${r.text}`);
      assert.equal(r.json.code, 'POLICY_UNAVAILABLE');
      assert.equal(r.headers['retry-after'], '5');
      assert.doesNotMatch(r.text, /allocate|EIO|at /, 'neither its message nor a stack');
      assert.ok(
        lines.some((l) => l.includes(fault.message) && JSON.parse(l).level === 50),
        'logged at error with its cause',
      );
    }
    store.fault = undefined;
    const stored = await upload(candidate);
    assert.equal(stored.status, 201, stored.text);
  });

  it('a defect of ours while verifying is 500 INTERNAL without detail, not 422', async () => {
    store.fault = new TypeError("Cannot read properties of undefined (reading 'wasm')");
    try {
      const r = await upload(await wasmCandidate(Buffer.from('ignored'), 'defect'));
      assert.equal(r.status, 500, r.text);
      assert.equal(r.json.code, 'INTERNAL');
      assert.doesNotMatch(r.text, /Cannot read|TypeError|at /);
    } finally {
      store.fault = undefined;
    }
  });

  it('simulate: a revision the bundle source fails to serve is 503; one it does not have is 404', async () => {
    const simulate = (ref: string) =>
      as('ops')('POST', `/v1/auth/simulate?policy_ref=${ref}`, {
        input: {
          tenant: { id: 'tp' },
          subject: { id: 'c1', type: 'customer', aal: 1 },
          resource: { type: 'account', tenant_id: 'tp' },
          action: 'account.read',
          purpose: 'customer.account.view',
          context: { ip: '10.0.0.1', risk: 'low' },
        },
      });
    assert.equal((await simulate(store.current?.policyVersion ?? '')).status, 200);
    const unknown = await simulate('no-such-ref');
    assert.equal(unknown.status, 404, unknown.text);
    assert.equal(unknown.json.code, 'POLICY_REF_NOT_FOUND');
    const failing = await simulate('broken-ref');
    assert.equal(failing.status, 503, failing.text);
    assert.equal(failing.json.code, 'POLICY_UNAVAILABLE');
    assert.equal(failing.headers['retry-after'], '5');
  });
});
