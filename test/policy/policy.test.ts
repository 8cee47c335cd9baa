import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { loadPolicy } from '@open-policy-agent/opa-wasm';
import { inputForPolicy } from '../../shared/ip-ranges.ts';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  BundleError,
  bundleFileReader,
  checkBundle,
  defaultBundleDir,
  evaluatorOf,
  instantiateBundle,
  policyInputJson,
  loadBundle,
  loadTrustedKeys,
  manifestMaxBytes,
  registryMaxBytes,
  routesMaxBytes,
  verdictEntrypoint,
} from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { build, policyDir, staleSources } from '../../policy/build.ts';
import { findOpa } from '../../policy/opa.ts';
import { signDocument } from '../../shared/signing.ts';
import { parsedTexts } from '../helpers/json-parses.ts';
import { detachedRespellings } from '../helpers/respell.ts';

const opa = findOpa();
// Under CI the policy tests must run: a missing opa is a failure, never a silent skip.
const skipOpa = opa
  ? false
  : process.env.CI === 'true'
    ? false
    : 'opa CLI not installed (CI installs it; see .ci/run)';

describe('policy sources', () => {
  it('opa test passes with full rule coverage reported', { skip: skipOpa }, () => {
    assert.ok(opa, 'opa CLI is required under CI=true');
    const out = execFileSync(opa, ['test', '--coverage', 'src', 'data'], { cwd: policyDir }).toString();
    const report = JSON.parse(out) as { coverage: number; files: Record<string, unknown> };
    assert.ok(report.coverage >= 95, `coverage ${report.coverage}`);
    const verbose = execFileSync(opa, ['test', '-v', 'src', 'data'], { cwd: policyDir }).toString();
    assert.match(verbose, /PASS: \d+\/\d+/);
    assert.doesNotMatch(verbose, /FAIL/);
  });

  it('the committed bundle is not older than its sources', async () => {
    assert.deepEqual(await staleSources(), [], 'rebuild with `npx tsx policy/build.ts`');
  });

  it('rebuilding from the sources reproduces the committed WASM byte for byte', {
    skip: skipOpa,
  }, async () => {
    const out = await mkdtemp(join(tmpdir(), 'policy-'));
    try {
      await build(out, true);
      const hash = async (dir: string) =>
        createHash('sha256')
          .update(await readFile(join(dir, 'policy.wasm')))
          .digest('hex');
      assert.equal(await hash(out), await hash(defaultBundleDir));
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
});

describe('policy bundle verification', () => {
  const files = async () => ({
    manifest: await readFile(join(defaultBundleDir, 'manifest.json')),
    registry: await readFile(join(defaultBundleDir, 'registry.json')),
    wasm: await readFile(join(defaultBundleDir, 'policy.wasm')),
    routes: await readFile(join(defaultBundleDir, 'routes.json')),
  });

  it('loads the committed bundle and evaluates decisions', async () => {
    const rev = await loadBundle(defaultBundleDir, await loadTrustedKeys());
    assert.equal(rev.registry.purposes.length >= 9, true);
    const names = rev.registry.purposes.map((p) => p.name);
    for (const n of [
      'customer.transact',
      'customer.account.view',
      'customer.beneficiary.manage',
      'support.investigate',
      'fraud.review',
      'compliance.kyc',
      'analytics.aggregate',
      'marketing.personalize',
      'operational',
    ]) {
      assert.ok(names.includes(n), n);
    }
    const d = rev.evaluate({
      tenant: { id: 't1' },
      subject: { id: 'c', type: 'customer', aal: 1, tuples: [] },
      resource: { type: 'account', tenant_id: 't2' },
      action: 'account.read',
      purpose: 'customer.account.view',
      context: { ip: '10.0.0.1', risk: 'low', now_ns: Date.now() * 1e6 },
    });
    assert.equal(d.allow, false);
    assert.equal(d.policy_version, rev.policyVersion);
    assert.ok(d.reasons.some((r) => r.check === 'resource_tenant' && !r.ok));
  });

  it('decides an input given as its JSON text as it decides the input (issue 18: serialised once per Check)', async () => {
    const rev = await loadBundle(defaultBundleDir, await loadTrustedKeys());
    const input = (tenantOfResource: string, ranges: unknown) => ({
      tenant: { id: 't1', status: 'ACTIVE', security: { allowed_ip_ranges: ranges } },
      subject: { id: 'c', type: 'customer', aal: 1, tuples: [] },
      resource: { type: 'account', tenant_id: tenantOfResource },
      action: 'account.read',
      purpose: 'customer.account.view',
      context: { ip: '10.0.0.1', risk: 'low', now_ns: Date.now() * 1e6 },
    });
    for (const i of [
      input('t1', []),
      input('t2', []),
      input('t1', ['10.0.0.0/8']),
      input('t1', ['10.0.0.0/8x']),
    ]) {
      const json = policyInputJson(i);
      assert.deepEqual(rev.decideJson(json.evaluated), rev.decide(i), JSON.stringify(i));
      assert.deepEqual(rev.evaluateJson(json.evaluated), rev.evaluate(i), `traced: ${JSON.stringify(i)}`);
    }
    // The same text is recorded, unless a range the WASM cannot read was handed over as no range:
    // then the input as it came is recorded (a replay hands it over the same way again).
    const plain = input('t1', ['10.0.0.0/8']);
    assert.equal(policyInputJson(plain).recorded, policyInputJson(plain).evaluated);
    assert.deepEqual(JSON.parse(policyInputJson(plain).recorded), plain);
    const unreadable = input('t1', ['10.0.0.0/8x']);
    const texts = policyInputJson(unreadable);
    assert.deepEqual(JSON.parse(texts.recorded), unreadable);
    assert.notEqual(texts.evaluated, texts.recorded);
    assert.equal(rev.decideJson(texts.evaluated).allow, false, 'an unreadable range holds no caller');
  });

  /** A customer's read of an account of their own tenant (allowed), `context` added to its context. */
  const accountRead = (context: Record<string, unknown> = {}) => ({
    tenant: { id: 't1', status: 'ACTIVE', security: {} },
    subject: { id: 'c', type: 'customer', aal: 1, tuples: [] },
    resource: { type: 'account', tenant_id: 't1' },
    action: 'account.read',
    purpose: 'customer.account.view',
    context: { ip: '10.0.0.1', risk: 'low', now_ns: 1, ...context },
  });

  /** The library's own LoadedPolicy over the bundle's WASM with the data instantiateBundle gives it. */
  const wasmHost = async (f: Awaited<ReturnType<typeof files>>, entrypoint?: string) => {
    const host = await loadPolicy(f.wasm);
    const manifest = JSON.parse(f.manifest.toString());
    host.setData({
      registry: JSON.parse(f.registry.toString()),
      meta: { policy_version: manifest.policy_version },
    });
    const entry = (host.entrypoints as Record<string, number>)[entrypoint ?? manifest.entrypoint] as number;
    // Its memory and heap start (fields of opa-wasm 1.10's LoadedPolicy), to aim inputs at the end of memory.
    const room = () => {
      const h = host as unknown as { mem: { buffer: ArrayBuffer }; dataHeapPtr: number };
      return h.mem.buffer.byteLength - h.dataHeapPtr;
    };
    return { host, entry, room };
  };

  it("evaluates through opa_eval directly as the WASM host's own evaluate does, growing memory as inputs need and within a bound", async () => {
    const f = await files();
    const rev = await instantiateBundle(f, await loadTrustedKeys());
    const { host, entry } = await wasmHost(f);
    const hostSays = (input: unknown) =>
      (host.evaluate(inputForPolicy(input), entry) as { result?: unknown }[] | undefined)?.[0]?.result;
    const base = {
      tenant: { id: 't1', status: 'ACTIVE', security: {} },
      subject: { id: 'c', type: 'customer', aal: 1, tuples: [] },
      resource: { type: 'account', tenant_id: 't1' },
      action: 'account.read',
      purpose: 'customer.account.view',
      context: { ip: '10.0.0.1', risk: 'low', now_ns: Date.now() * 1e6 },
    };
    const inputs: unknown[] = [
      base,
      { ...base, resource: { type: 'account', tenant_id: 't2' } },
      { ...base, context: { ...base.context, ua: 'ü€😀\u2028' } },
      // Far more than the memory the instance has: it grows for the text.
      { ...base, context: { ...base.context, ua: 'x'.repeat(3_000_000) } },
      { ...base, subject: { ...base.subject, name: '😀'.repeat(400_000) } },
    ];
    for (const input of inputs) assert.deepEqual(rev.evaluate(input), hostSays(input));
    // A falsy input is no input, as the host has it: the policy decides on nothing.
    for (const input of [undefined, null, 0, ''])
      assert.throws(() => rev.evaluate(input), /no well-formed decision/);
    // A bounded instance refuses an input past its bound instead of growing without end.
    const bounded = await instantiateBundle(f, await loadTrustedKeys(), { maxMemoryPages: 64 });
    assert.deepEqual(bounded.decide(base), rev.decide(base));
    assert.throws(() => bounded.decide({ ...base, context: { ...base.context, ua: 'x'.repeat(5_000_000) } }));
    assert.deepEqual(bounded.decide(base), rev.decide(base), 'and still decides afterwards');
  });

  it('decides as the WASM host does for input text ending at, just short of and just past the end of memory, whatever character straddles it', async () => {
    const f = await files();
    const trusted = await loadTrustedKeys();
    const base = JSON.stringify(accountRead({ ua: 'PAD' }));
    /** The input text of exactly `bytes` UTF-8 bytes, its padding ending in `tail` as it is (a lone surrogate unescaped). */
    const textOf = (bytes: number, tail: string) =>
      base.replace('PAD', 'x'.repeat(bytes - Buffer.byteLength(base) + 3 - Buffer.byteLength(tail)) + tail);
    const said = (decide: () => unknown) => {
      try {
        return decide();
      } catch (e) {
        return `threw ${String(e)}`;
      }
    };
    // An evaluation grows the memory past its input, so each case starts on a fresh pair; the two
    // start with the same memory and heap and grow alike, so the host's room is the revision's.
    for (const tail of ['', '€', '😀', '\uD800'])
      for (let d = -3; d <= 3; d++) {
        const rev = await instantiateBundle(f, trusted);
        const { host, entry, room } = await wasmHost(f, verdictEntrypoint);
        const hostSays = (text: string) =>
          (host.evaluate(new TextEncoder().encode(text).buffer, entry) as { result?: unknown }[])[0]?.result;
        for (const step of ['first', 'after it']) {
          const text = textOf(room() + d, tail);
          const what = `${JSON.stringify(tail)} ${d} bytes from the end, ${step}`;
          const decision = said(() => rev.decideJson(text));
          assert.deepEqual(
            decision,
            said(() => hostSays(text)),
            what,
          );
          assert.equal(typeof decision, 'object', `${what}: ${String(decision)}`);
        }
        const short = textOf(Buffer.byteLength(base), '');
        assert.deepEqual(rev.decideJson(short), hostSays(short), 'a short input after the long ones');
      }
  });

  it('evaluates with the data the instance holds at each call: after a later setData as the host does, and through the host where its fast-path fields are missing', async () => {
    const f = await files();
    const { host, entry } = await wasmHost(f, verdictEntrypoint);
    const run = evaluatorOf(host);
    const input = JSON.stringify(accountRead());
    const verdict = (rs: unknown) => (rs as { result?: { policy_version?: unknown } }[])[0]?.result;
    const hostSays = () => verdict(host.evaluate(new TextEncoder().encode(input).buffer, entry));
    const first = verdict(run(input, entry));
    assert.equal(first?.policy_version, JSON.parse(f.manifest.toString()).policy_version);
    assert.deepEqual(first, hostSays());
    // New data, larger than the first (the heap's start moves) and then smaller (it moves back).
    const registry = JSON.parse(f.registry.toString());
    const padded = { ...registry, padding: 'p'.repeat(200_000) };
    for (const [data, version] of [
      [{ registry: padded, meta: { policy_version: 'v-later' } }, 'v-later'],
      [{ registry, meta: { policy_version: 'v-again' } }, 'v-again'],
    ] as const) {
      host.setData(data);
      const now = verdict(run(input, entry));
      assert.equal(now?.policy_version, version);
      assert.deepEqual(now, hostSays());
    }
    // No fast-path fields (a wrapper), or an ABI before 1.2: the library evaluates, with the same answer.
    const wrapped = evaluatorOf({ evaluate: (i: unknown, e?: number | string) => host.evaluate(i, e) });
    assert.deepEqual(verdict(wrapped(input, entry)), hostSays());
    const oldAbi = evaluatorOf(Object.assign(Object.create(host) as typeof host, { minorVersion: 1 }));
    assert.deepEqual(verdict(oldAbi(input, entry)), hostSays());
    assert.deepEqual(verdict(oldAbi(undefined, entry)), verdict(host.evaluate(undefined, entry)), 'no input');
    assert.deepEqual(verdict(run(undefined, entry)), verdict(host.evaluate(undefined, entry)), 'no input');
  });

  it('refuses a registry whose content or signature was changed', async () => {
    const f = await files();
    const reg = JSON.parse(f.registry.toString());
    reg.purposes[0].min_aal = 0;
    await assert.rejects(
      instantiateBundle({ ...f, registry: Buffer.from(JSON.stringify(reg)) }, await loadTrustedKeys()),
      BundleError,
    );
  });

  it('refuses a registry re-signed by an untrusted key, even with a matching manifest', async () => {
    const f = await files();
    const { privateKey } = generateKeyPairSync('ed25519');
    const reg = signDocument({ ...JSON.parse(f.registry.toString()), signature: undefined }, privateKey);
    const regBuf = Buffer.from(JSON.stringify(reg));
    const manifest = signDocument(
      {
        ...JSON.parse(f.manifest.toString()),
        registry_sha256: createHash('sha256').update(regBuf).digest('hex'),
      },
      privateKey,
    );
    await assert.rejects(
      instantiateBundle(
        { ...f, registry: regBuf, manifest: Buffer.from(JSON.stringify(manifest)) },
        await loadTrustedKeys(),
      ),
      /signature does not verify/,
    );
  });

  it('refuses a manifest or registry whose signature is a second spelling of its own (padding, alphabet, spare bits)', async () => {
    const f = await files();
    const trusted = await loadTrustedKeys();
    const devKey = createPrivateKey({
      key: JSON.parse(await readFile(join(policyDir, 'keys', 'dev-signing.private.jwk'), 'utf8')),
      format: 'jwk',
    });
    const manifest = JSON.parse(f.manifest.toString()) as Record<string, unknown>;
    const registry = JSON.parse(f.registry.toString()) as { signature: string };
    for (const [name, other] of detachedRespellings(String(manifest.signature))) {
      const respelled = Buffer.from(JSON.stringify({ ...manifest, signature: other }));
      assert.throws(
        () => checkBundle({ ...f, manifest: respelled }, trusted),
        /bundle manifest signature does not verify/,
        name,
      );
    }
    for (const [name, other] of detachedRespellings(registry.signature)) {
      const regBuf = Buffer.from(JSON.stringify({ ...registry, signature: other }));
      const { signature: _old, ...unsigned } = manifest;
      const signed = signDocument(
        { ...unsigned, registry_sha256: createHash('sha256').update(regBuf).digest('hex') },
        devKey,
      );
      assert.throws(
        () => checkBundle({ ...f, registry: regBuf, manifest: Buffer.from(JSON.stringify(signed)) }, trusted),
        /purpose registry signature does not verify/,
        name,
      );
    }
  });

  it('refuses a WASM that does not match the manifest', async () => {
    const f = await files();
    const wasm = Buffer.from(f.wasm);
    wasm.writeUInt8((wasm.at(-1) ?? 0) ^ 1, wasm.length - 1);
    await assert.rejects(
      instantiateBundle({ ...f, wasm }, await loadTrustedKeys()),
      /does not match the manifest/,
    );
  });

  it('refuses a route table that does not match the manifest (issue 21 item 1)', async () => {
    const f = await files();
    const table = JSON.parse(f.routes.toString()) as { routes: { template: string; purpose: string }[] };
    const transfer = table.routes.find((r) => r.template === '/v1/transfers');
    assert.ok(transfer);
    transfer.purpose = 'operational';
    await assert.rejects(
      instantiateBundle({ ...f, routes: Buffer.from(JSON.stringify(table)) }, await loadTrustedKeys()),
      /routes\.json does not match the manifest/,
    );
  });

  it('will not load a bundle whose manifest names a route table the source does not serve', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bundle-'));
    try {
      await cp(defaultBundleDir, dir, { recursive: true });
      await rm(join(dir, 'routes.json'));
      await assert.rejects(loadBundle(dir, await loadTrustedKeys()), /routes\.json/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('swaps in a new route table signed with the same policy and registry', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bundle-'));
    const store = new PolicyStore(await loadTrustedKeys());
    try {
      await cp(defaultBundleDir, dir, { recursive: true });
      const first = await store.load(dir);
      assert.ok(first.routes?.some((r) => r.template === '/v1/health'));
      const { createPrivateKey } = await import('node:crypto');
      const key = createPrivateKey({
        key: JSON.parse(await readFile(join(policyDir, 'keys', 'dev-signing.private.jwk'), 'utf8')),
        format: 'jwk',
      });
      const table = JSON.parse(await readFile(join(dir, 'routes.json'), 'utf8')) as {
        routes: { template: string }[];
      };
      const text = JSON.stringify({ routes: table.routes.filter((r) => r.template !== '/v1/health') });
      const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8'));
      const next = signDocument(
        {
          ...manifest,
          signature: undefined,
          routes_sha256: createHash('sha256').update(text).digest('hex'),
        },
        key,
      );
      await writeFile(join(dir, 'routes.json'), text);
      await writeFile(join(dir, 'manifest.json'), JSON.stringify(next));
      const second = await store.load(dir);
      assert.equal(second.policyVersion, first.policyVersion);
      assert.equal(store.current, second);
      assert.equal(
        store.current?.routes?.some((r) => r.template === '/v1/health'),
        false,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  /** `bytes` of JSON nested as deep as it goes: some 29 times that in heap once parsed. */
  const nested = (bytes: number) => Buffer.from(`${'['.repeat(bytes / 2)}${']'.repeat(bytes / 2)}`);

  it('refuses a bundle its trusted signers did not sign before parsing its registry, whatever its registry holds', async () => {
    const f = await files();
    const { privateKey } = generateKeyPairSync('ed25519');
    const registry = nested(1_000_000);
    const { signature: _s, ...unsigned } = JSON.parse(f.manifest.toString()) as Record<string, unknown>;
    const forged = signDocument(
      { ...unsigned, registry_sha256: createHash('sha256').update(registry).digest('hex') },
      privateKey,
    );
    const bundle = { ...f, manifest: Buffer.from(JSON.stringify(forged)), registry };
    const trusted = await loadTrustedKeys();
    const unsignedBundle = { ...bundle, manifest: Buffer.from(JSON.stringify(unsigned)) };
    for (const [b, why] of [
      [bundle, /bundle manifest signature does not verify/],
      [unsignedBundle, /bundle manifest is malformed/],
    ] as const) {
      const lengths = await parsedTexts(() => assert.throws(() => checkBundle(b, trusted), why));
      assert.deepEqual(lengths, [b.manifest.length], 'the manifest alone is parsed');
    }
  });

  it("refuses a registry whose bytes are not the signed manifest's before parsing it", async () => {
    const f = await files();
    const registry = nested(1_000_000);
    const trusted = await loadTrustedKeys();
    const lengths = await parsedTexts(() =>
      assert.throws(
        () => checkBundle({ ...f, registry }, trusted),
        /registry\.json does not match the manifest/,
      ),
    );
    assert.ok(!lengths.includes(registry.length), 'the registry is not parsed');
  });

  it('refuses a JSON file past its size before parsing anything, loaded from a source or given', async () => {
    const f = await files();
    const trusted = await loadTrustedKeys();
    for (const [name, change] of [
      ['manifest.json', { manifest: nested(manifestMaxBytes + 2) }],
      ['registry.json', { registry: nested(registryMaxBytes + 2) }],
      ['routes.json', { routes: nested(routesMaxBytes + 2) }],
    ] as const) {
      const bundle = { ...f, ...change };
      const why = new RegExp(`${name} is larger than \\d+ bytes`);
      const lengths = await parsedTexts(() => assert.throws(() => checkBundle(bundle, trusted), why));
      assert.deepEqual(lengths, [], `${name}: nothing parsed`);
    }
    const dir = await mkdtemp(join(tmpdir(), 'bundle-'));
    try {
      await cp(defaultBundleDir, dir, { recursive: true });
      await writeFile(join(dir, 'manifest.json'), nested(4_000_000));
      const lengths = await parsedTexts(() =>
        assert.rejects(loadBundle(dir, trusted), /manifest\.json is larger than/),
      );
      assert.deepEqual(lengths, [], 'nor by the loader');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the store keeps the current revision when a bad bundle arrives and addresses revisions by version', async () => {
    const store = new PolicyStore(await loadTrustedKeys());
    const rev = await store.load(defaultBundleDir);
    await assert.rejects(store.load(join(tmpdir(), 'no-such-bundle')));
    assert.equal(store.current?.policyVersion, rev.policyVersion);
    assert.equal(store.get(rev.policyVersion), rev);
    assert.equal(store.get('unknown-version'), undefined);
  });
});

describe('policy lifecycle', () => {
  it('a URL source trickling a file is abandoned at the read deadline, and the poll starts no read while one is under way', async () => {
    const { createServer } = await import('node:http');
    let open = 0;
    let most = 0;
    const server = createServer((_req, res) => {
      // The manifest's answer begun, then a space every 50 ms: never quiet long enough for undici's own timeouts.
      open += 1;
      most = Math.max(most, open);
      res.writeHead(200);
      const tick = setInterval(() => res.write(' '), 50);
      res.on('close', () => {
        clearInterval(tick);
        open -= 1;
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/bundle/`;
    const store = new PolicyStore(await loadTrustedKeys());
    try {
      const started = Date.now();
      await assert.rejects(
        bundleFileReader(url, 300)('manifest.json'),
        (err) =>
          !(err instanceof BundleError) &&
          /manifest\.json: not read within 300 ms/.test((err as Error).message),
      );
      assert.ok(Date.now() - started < 2_000, `the read took ${Date.now() - started} ms`);
      store.watch(url, 20);
      await new Promise((r) => setTimeout(r, 600));
      assert.equal(most, 1, `${most} reads of the trickling manifest were under way at once`);
    } finally {
      store.stop();
      server.closeAllConnections();
      server.close();
    }
  });

  it('reads a file from a URL source no further than its bound: one streamed without end is refused there', async () => {
    const { createServer } = await import('node:http');
    const streamed = 64 * 2 ** 20;
    let sent = 0;
    const server = createServer(async (req, res) => {
      const name = (req.url ?? '/').replace(/^\/bundle\//, '');
      if (name !== 'registry.json') {
        res.end(await readFile(join(defaultBundleDir, name)).catch(() => ''));
        return;
      }
      // 64 MiB of spaces as fast as the reader takes them (no length given: chunked).
      const chunk = Buffer.alloc(65_536, 0x20);
      const pump = () => {
        while (sent < streamed && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/bundle/`;
    try {
      await assert.rejects(
        loadBundle(url, await loadTrustedKeys()),
        (err) =>
          err instanceof BundleError && /registry\.json is larger than 1048576 bytes/.test(err.message),
      );
      assert.ok(
        sent < 16 * 2 ** 20,
        `the reader took ${sent} bytes of registry.json (bound ${registryMaxBytes}): it read on past the bound`,
      );
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('loads a bundle from a URL and hot-swaps a newer one without a restart', async () => {
    const { createServer } = await import('node:http');
    const { cp, mkdtemp: mk, writeFile: wf } = await import('node:fs/promises');
    const dir = await mk(join(tmpdir(), 'bundle-'));
    await cp(defaultBundleDir, dir, { recursive: true });
    const server = createServer(async (req, res) => {
      try {
        res.end(await readFile(join(dir, (req.url ?? '/').replace(/^\/bundle\//, ''))));
      } catch {
        res.statusCode = 404;
        res.end();
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/bundle/`;
    const store = new PolicyStore(await loadTrustedKeys());
    try {
      const first = await store.load(url);
      assert.equal(
        first.policyVersion,
        JSON.parse(await readFile(join(defaultBundleDir, 'manifest.json'), 'utf8')).policy_version,
      );
      // A newer, properly signed bundle appears at the source: the registry changes version.
      const { createPrivateKey } = await import('node:crypto');
      const key = createPrivateKey({
        key: JSON.parse(await readFile(join(policyDir, 'keys', 'dev-signing.private.jwk'), 'utf8')),
        format: 'jwk',
      });
      const reg = JSON.parse(await readFile(join(dir, 'registry.json'), 'utf8'));
      const next = signDocument({ ...reg, signature: undefined, version: '2099-01-01T00:00:00Z' }, key);
      const regText = `${JSON.stringify(next, null, 2)}\n`;
      const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8'));
      const nextManifest = signDocument(
        {
          ...manifest,
          signature: undefined,
          registry_version: next.version,
          policy_version: `${manifest.policy_version}-next`,
          registry_sha256: createHash('sha256').update(regText).digest('hex'),
        },
        key,
      );
      await wf(join(dir, 'registry.json'), regText);
      await wf(join(dir, 'manifest.json'), JSON.stringify(nextManifest));
      store.watch(url, 50);
      for (let i = 0; i < 100 && store.current?.registryVersion !== '2099-01-01T00:00:00Z'; i++)
        await new Promise((r) => setTimeout(r, 20));
      assert.equal(store.current?.registryVersion, '2099-01-01T00:00:00Z');
      assert.equal(
        store.get(first.policyVersion),
        first,
        'the previous revision stays addressable by policy_ref',
      );
      // A tampered bundle at the source is refused; the current one stays.
      await wf(join(dir, 'registry.json'), regText.replace('2099', '2098'));
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(store.current?.registryVersion, '2099-01-01T00:00:00Z');
    } finally {
      store.stop();
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
