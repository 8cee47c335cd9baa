/**
 * Policy bundles: loaded from a directory or a URL, verified (manifest signature, WASM, registry
 * and route table hashes, registry signature), instantiated, and kept by policy version so
 * `policy_ref` can name any of the last few. A bundle that does not verify is refused whole.
 * The route table (`routes.json`, issue 21 item 1) is the edge's: the route declarations of
 * shared/routes/ as policy/build.ts wrote them, signed and versioned with the policy.
 */
import { createHash, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type LoadedPolicy, loadPolicy } from '@open-policy-agent/opa-wasm';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { type Dispatcher, request } from 'undici';
import { inputForPolicy } from '../../shared/ip-ranges.ts';
import { jsonStructureProblem } from '../../shared/json-body.ts';
import type { RouteDeclaration } from '../../shared/routes/types.ts';
import { publicKeysFromJwks, verifyDocument } from '../../shared/signing.ts';
import { declaresOwnMemory } from './wasm-memory.ts';

export const defaultBundleDir = fileURLToPath(new URL('../dist/', import.meta.url));
export const defaultTrustFile = fileURLToPath(new URL('../keys/trusted.json', import.meta.url));

const Manifest = Type.Object({
  policy_version: Type.String({ minLength: 1 }),
  registry_version: Type.String({ minLength: 1 }),
  entrypoint: Type.String(),
  wasm_sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  registry_sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  /** Absent in bundles built before the route table shipped in them (an old `policy_ref`). */
  routes_sha256: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$' })),
  signature: Type.String(),
});

/** One entry of `routes.json`: a route declaration (shared/routes/types.ts). */
const RouteEntry = Type.Object(
  {
    method: Type.String({ pattern: '^[A-Z]+$' }),
    template: Type.String({ pattern: '^/' }),
    purpose: Type.String({ minLength: 1 }),
    resource: Type.String({ minLength: 1 }),
    action: Type.String({ minLength: 1 }),
    credential: Type.Union(
      ['public', 'customer', 'service', 'staff', 'core-client', 'agent', 'scim'].map((c) => Type.Literal(c)),
    ),
    roles: Type.Optional(Type.Array(Type.String())),
    disableRequestBodyBuffering: Type.Optional(Type.Literal(true)),
    money: Type.Optional(Type.Union(['request', 'ledger', 'no-api-keys'].map((m) => Type.Literal(m)))),
    errorFormat: Type.Optional(Type.Union(['core', 'problem', 'scim'].map((f) => Type.Literal(f)))),
  },
  { additionalProperties: false },
);
const RouteTable = Type.Object({ routes: Type.Array(RouteEntry) }, { additionalProperties: false });

const Purpose = Type.Object({
  name: Type.String(),
  min_aal: Type.Integer({ minimum: 0 }),
  resources: Type.Array(Type.String()),
  actions: Type.Array(Type.String()),
  field_policies: Type.Record(Type.String(), Type.String()),
  consent_required: Type.Boolean(),
  retention_days: Type.Integer(),
});
const Registry = Type.Object({
  version: Type.String(),
  purposes: Type.Array(Purpose),
  signature: Type.String(),
});
export type Registry = Static<typeof Registry>;

/** What the hot-path entry point (`verdict`) returns; anything else is treated as no decision. */
export const PolicyVerdict = Type.Object({
  allow: Type.Boolean(),
  status: Type.Integer(),
  code: Type.String(),
  message: Type.String(),
  step_up: Type.Boolean(),
  obligations: Type.Record(Type.String(), Type.Unknown()),
  policy_version: Type.String(),
  registry_version: Type.String(),
});
export type PolicyVerdict = Static<typeof PolicyVerdict>;

/** What the traced entry point (`decision`) returns: the verdict and every check's outcome. */
export const PolicyDecision = Type.Composite([
  PolicyVerdict,
  Type.Object({
    reasons: Type.Array(Type.Object({ check: Type.String(), ok: Type.Boolean(), detail: Type.Unknown() })),
  }),
]);
export type PolicyDecision = Static<typeof PolicyDecision>;

/** The untraced entry point policy/build.ts compiles beside the manifest's traced one. */
export const verdictEntrypoint = 'payments/authz/verdict';

const checkManifest = TypeCompiler.Compile(Manifest);
const checkRegistry = TypeCompiler.Compile(Registry);
const checkRoutes = TypeCompiler.Compile(RouteTable);
const checkDecision = TypeCompiler.Compile(PolicyDecision);
const checkVerdict = TypeCompiler.Compile(PolicyVerdict);
const utf8In = new TextEncoder();
const utf8Out = new TextDecoder();

/**
 * The fields of opa-wasm's LoadedPolicy (1.10, ABI 1.2 and later) that its own `evaluate` uses
 * for the `opa_eval` fast path, read from the instance at every call (`setData` moves the data
 * and the heap's start); `fastPathOf` checks them at load, else evaluation goes through the library.
 */
interface WasmHost {
  readonly mem: WasmMemory;
  readonly dataAddr: number;
  readonly dataHeapPtr: number;
}

interface WasmPolicy {
  host: WasmHost;
  opaEval: (
    reserved: number,
    entrypoint: number,
    data: number,
    input: number,
    length: number,
    heap: number,
    format: number,
  ) => number;
}

/** A WebAssembly.Memory, as far as evaluation uses it. */
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}

function fastPathOf(policy: unknown): WasmPolicy | undefined {
  const p = policy as Partial<
    Record<'minorVersion' | 'mem' | 'dataAddr' | 'dataHeapPtr' | 'wasmInstance', unknown>
  >;
  const mem = p.mem as Partial<WasmMemory> | undefined;
  const opaEval = (p.wasmInstance as { exports?: Record<string, unknown> } | undefined)?.exports?.opa_eval;
  if (!(typeof p.minorVersion === 'number' && p.minorVersion >= 2) || typeof opaEval !== 'function')
    return undefined;
  if (!(mem?.buffer instanceof ArrayBuffer) || typeof mem.grow !== 'function') return undefined;
  if (typeof p.dataAddr !== 'number' || typeof p.dataHeapPtr !== 'number') return undefined;
  return { host: policy as WasmHost, opaEval: opaEval as WasmPolicy['opaEval'] };
}

/**
 * `opa_eval` of an input given as JSON text, written straight into the WASM's memory, the JSON
 * result set read back with one shared decoder: LoadedPolicy.evaluate's own fast path, less an
 * encoder, a copy and a decoder made per call and a byte-by-byte scan for the result's end, which
 * a CPU profile under the authz bench put above any other host function per Check (issue 18 item 1).
 * Memory grows only as much as the text needs (a bundle's page limit still applies).
 */
function evaluateJson(p: WasmPolicy, inputJson: string | undefined, entrypoint: number): unknown {
  const { mem, dataAddr, dataHeapPtr: at } = p.host;
  if (inputJson === undefined) return resultAt(mem, p.opaEval(0, entrypoint, dataAddr, 0, 0, at, 0));
  let { read, written } = utf8In.encodeInto(inputJson, new Uint8Array(mem.buffer, at));
  if (read < inputJson.length) {
    const needed = at + Buffer.byteLength(inputJson) - mem.buffer.byteLength;
    mem.grow(Math.ceil(needed / wasmPageBytes));
    ({ written } = utf8In.encodeInto(inputJson, new Uint8Array(mem.buffer, at)));
  }
  return resultAt(mem, p.opaEval(0, entrypoint, dataAddr, at, written, at + written, 0));
}

/**
 * How a loaded policy evaluates input JSON text (none: no input) at an entry point: `opa_eval`
 * directly where the instance has the fields its own fast path uses (checked once, read at every
 * call), else the library's `evaluate` of the text's bytes. Its answer is the library's result set.
 */
export function evaluatorOf(
  policy: Pick<LoadedPolicy, 'evaluate'>,
): (inputJson: string | undefined, entrypoint: number) => unknown {
  const fast = fastPathOf(policy);
  return fast
    ? (inputJson, entrypoint) => evaluateJson(fast, inputJson, entrypoint)
    : (inputJson, entrypoint) =>
        policy.evaluate(inputJson === undefined ? undefined : utf8In.encode(inputJson).buffer, entrypoint);
}

/** The JSON text `opa_eval` left at `address` (NUL-terminated), parsed. */
function resultAt(memory: WasmMemory, address: number): unknown {
  // The evaluation may have grown the memory: a view of its buffer now.
  const mem = new Uint8Array(memory.buffer);
  return JSON.parse(utf8Out.decode(mem.subarray(address, mem.indexOf(0, address))));
}

/** An input as the WASM host takes it: JSON text of it through inputForPolicy, none for a falsy one (as LoadedPolicy.evaluate). */
const inputText = (input: unknown): string | undefined =>
  input ? (JSON.stringify(inputForPolicy(input)) as string | undefined) : undefined;

/** The traced entry point's answer, checked. */
function decisionOf(results: unknown): PolicyDecision {
  const result = (results as { result?: unknown }[] | undefined)?.[0]?.result;
  if (!checkDecision.Check(result)) throw new Error('policy produced no well-formed decision');
  return result;
}

/** The verdict entry point's answer, checked. */
function verdictOf(results: unknown): PolicyVerdict {
  const result = (results as { result?: unknown }[] | undefined)?.[0]?.result;
  if (!checkVerdict.Check(result)) throw new Error('policy produced no well-formed decision');
  return result;
}

/**
 * A bundle refused for what it is: a file missing from its source, its signature, a hash or its
 * shape, or a WASM that does not load as an OPA policy. Anything else thrown while loading or
 * running one (the WASM runtime short of memory, the source unreadable) is the service's failure,
 * never the bundle's: policy tooling answers it as unavailable, not as a bad bundle.
 */
export class BundleError extends Error {}

export interface PolicyRevision {
  policyVersion: string;
  /** The files it was instantiated from: another thread instantiates the same revision from them (core's impact worker). */
  files: BundleFiles;
  registryVersion: string;
  registry: Registry;
  /**
   * The edge's route table, when the bundle carries one (every bundle policy/build.ts writes
   * now); absent for an old revision or a candidate uploaded without it, which only simulate.
   */
  routes: readonly RouteDeclaration[] | undefined;
  /** The SHA-256 of `routes.json`: a new table with the same policy and registry is still a new bundle. */
  routesSha256: string | undefined;
  /** Synchronous evaluation with the `reasons` trace (simulate, the audit of a denial); throws when the policy yields no well-formed decision. */
  evaluate(input: unknown): PolicyDecision;
  /**
   * The same decision without the trace: what a Check evaluates (issue 18 item 1: formatting
   * every check's detail was most of the WASM's work). A bundle built before the verdict entry
   * point existed (an old `policy_ref`) answers with its traced decision.
   */
  decide(input: unknown): PolicyVerdict;
  /**
   * decide() of an input given as its JSON text as the policy reads it (policyInputJson): the
   * edge serialises each Check's input once, evaluates that text and records the same text for
   * replay, where the WASM host would serialise it again (issue 18 item 1).
   */
  decideJson(inputJson: string): PolicyVerdict;
  /** evaluate() of an input given as that text: a denial's audit traces the text its Check decided. */
  evaluateJson(inputJson: string): PolicyDecision;
}

/**
 * The input's JSON text as the policy reads it (through inputForPolicy, as every evaluation is),
 * and as it is recorded for replay: the same text unless inputForPolicy changed a range the WASM
 * cannot read, in which case the input as it came is recorded (a replay goes through it again).
 */
export interface PolicyInputJson {
  evaluated: string;
  recorded: string;
}

export function policyInputJson(input: unknown): PolicyInputJson {
  const forPolicy = inputForPolicy(input);
  const evaluated = JSON.stringify(forPolicy);
  return { evaluated, recorded: forPolicy === input ? evaluated : JSON.stringify(input) };
}

/**
 * Builtins OPA's WASM target leaves to the host. Nanoseconds travel as JS numbers: precise to
 * well under a microsecond at today's epoch, which is all an expiry comparison needs.
 */
const hostBuiltins = {
  'time.parse_rfc3339_ns': (value: unknown): number => {
    const ms =
      typeof value === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(value) ? Date.parse(value) : Number.NaN;
    if (Number.isNaN(ms)) throw new Error('time.parse_rfc3339_ns: not an RFC 3339 timestamp');
    return ms * 1e6;
  },
};

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

export async function loadTrustedKeys(file = defaultTrustFile): Promise<KeyObject[]> {
  return publicKeysFromJwks(JSON.parse(await readFile(file, 'utf8')) as unknown);
}

/** A bundle's files; `routes` (routes.json) where the manifest names one and the caller has it. */
export interface BundleFiles {
  manifest: Buffer;
  registry: Buffer;
  wasm: Buffer;
  routes?: Buffer | undefined;
}

/** The route table of a verified manifest: hash-checked against it, then held to RouteTable. */
function routeTableOf(
  manifest: { routes_sha256?: string | undefined },
  routes: Buffer | undefined,
): readonly RouteDeclaration[] | undefined {
  if (!routes) return undefined;
  if (!manifest.routes_sha256) throw new BundleError('routes.json is not named by the manifest');
  if (sha256(routes) !== manifest.routes_sha256)
    throw new BundleError('routes.json does not match the manifest');
  const doc = parsed(routes, 'routes.json');
  if (!checkRoutes.Check(doc)) throw new BundleError('route table is malformed');
  return doc.routes as RouteDeclaration[];
}

/** 64 KiB WebAssembly pages: how much linear memory one instance may grow to when bounded. */
export const wasmPageBytes = 65_536;

export interface InstantiateOptions {
  /**
   * Bound the instance's linear memory (WebAssembly pages). A worker's `resourceLimits` bound its
   * V8 heap, not WASM memory: without this a candidate whose evaluation allocates without end
   * grows its memory to 4 GiB. Past the bound OPA's allocator aborts and that evaluation throws
   * (issue 22: a candidate's evaluation fails, the process does not).
   */
  maxMemoryPages?: number;
}

/** WebAssembly's memory constructor (the ES library this project compiles against does not declare the namespace). */
const WasmMemory = (
  globalThis as unknown as {
    WebAssembly: { Memory: new (descriptor: { initial: number; maximum?: number }) => unknown };
  }
).WebAssembly.Memory;

/** The linear memory opa-wasm gives an instance when none is asked for (its default). */
const defaultMemory = { initial: 5 };

/**
 * The bundle's WASM (its signature verified) loaded with its data; a BundleError where the bytes
 * are at fault. The one step of loading that is ours alone, the instance's linear memory, is taken
 * first on its own: a RangeError there is the runtime short of memory, a failure of this service.
 * Everything after it runs the module or reads what it answers (its start function, `builtins`,
 * `entrypoints`, its allocator and JSON parser), so whatever it throws is the bundle's: a module
 * that does not compile, link or start, opa-wasm's refusals (it throws strings), an export it
 * lacks (TypeError), a recursion without end (RangeError: the call stack), an address outside its
 * memory (RangeError) or text that is not JSON (SyntaxError). Told apart by class alone, those
 * two were answered as ours (503, retried for ever) or as a defect of ours (500).
 */
async function loadedPolicy(
  wasm: Buffer,
  memory: { initial: number; maximum: number } | undefined,
  data: Record<string, unknown>,
): Promise<LoadedPolicy> {
  new WasmMemory(memory ?? defaultMemory);
  try {
    const policy = await loadPolicy(wasm, memory ? { ...memory } : undefined, hostBuiltins);
    policy.setData(data);
    return policy;
  } catch (err) {
    // A module's opa_abort throws the text it hands the host, a string of its own choosing: named,
    // never repeated (the edge logs why a shadow did not load).
    const why = err instanceof Error ? err.message.slice(0, 200) : 'it aborted (opa_abort)';
    throw new BundleError(`policy.wasm does not load as an OPA policy: ${why}`);
  }
}

/** A bundle's files whose signatures, hashes and shapes verify: nothing of its WASM has run yet. */
export interface CheckedBundle {
  manifest: Static<typeof Manifest>;
  registry: Registry;
  routes: readonly RouteDeclaration[] | undefined;
}

/**
 * The most each JSON file of a bundle may weigh (bytes), checked before any of them is parsed: a
 * JSON.parse builds up to 29 times its text in heap (nested empty arrays), on the thread that
 * verifies (core's event loop for an upload). The development bundle's are 1 KB, 31 KB and 71 KB;
 * the candidate upload's schema takes the first two at these sizes (core/policy/candidates.ts).
 */
export const manifestMaxBytes = 65_536;
export const registryMaxBytes = 1_048_576;
export const routesMaxBytes = 4_194_304;
/**
 * The most a bundle's WASM may weigh (the development bundle's is 171 KB; an upload's base64 is
 * held to 3 MiB of it): what a bundle source is read for at most.
 */
export const wasmMaxBytes = 16 * 2 ** 20;

/** Each file of a bundle (policy/dist layout) and its bound. */
const fileMaxBytes: Readonly<Record<string, number>> = {
  'manifest.json': manifestMaxBytes,
  'registry.json': registryMaxBytes,
  'routes.json': routesMaxBytes,
  'policy.wasm': wasmMaxBytes,
};

const tooLarge = (name: string, max: number) => new BundleError(`${name} is larger than ${max} bytes`);

/** A BundleError for the first file past its bound. */
function ensureSizes(files: BundleFiles): void {
  for (const [name, file] of [
    ['manifest.json', files.manifest],
    ['registry.json', files.registry],
    ['routes.json', files.routes],
    ['policy.wasm', files.wasm],
  ] as const) {
    const max = fileMaxBytes[name] ?? 0;
    if (file && file.length > max) throw tooLarge(name, max);
  }
}

/**
 * How deep a bundle's JSON files may nest (the development bundle's nest 4 deep). The manifest is
 * parsed and its canonical JSON written (shared/signing.ts, recursively) before any signature
 * verifies, and its schema takes members of any shape: one nested 30,000 deep within 64 KiB ran
 * that out of call stack, a RangeError answered as this service's failure (503, retried).
 */
export const bundleJsonMaxDepth = 32;

/** A file's JSON; a BundleError naming `what` when it is not JSON or nests past bundleJsonMaxDepth (unparsed). */
function parsed(file: Buffer, what: string): unknown {
  const text = file.toString('utf8');
  if (jsonStructureProblem(text, bundleJsonMaxDepth, Number.POSITIVE_INFINITY))
    throw new BundleError(`${what} is nested more than ${bundleJsonMaxDepth} levels deep`);
  try {
    return JSON.parse(text);
  } catch {
    throw new BundleError(`${what} is not JSON`);
  }
}

/**
 * The manifest, the root of a bundle's trust: its signature is inside it, over its canonical JSON,
 * so it is parsed first, within manifestMaxBytes. Every other file is trusted through the hash of
 * its bytes this signed manifest names, checked before that file is parsed.
 */
function signedManifest(files: BundleFiles, trusted: KeyObject[]): Static<typeof Manifest> {
  const manifest = parsed(files.manifest, 'bundle manifest');
  if (!checkManifest.Check(manifest)) throw new BundleError('bundle manifest is malformed');
  if (!verifyDocument(manifest, trusted)) throw new BundleError('bundle manifest signature does not verify');
  return manifest;
}

/**
 * Verify a bundle's files without running any of it: the manifest signed by a trusted key, the
 * WASM, registry (and route table) the bytes the manifest names, each checked before it is parsed,
 * and the registry signed too. A file past its size is refused before anything is parsed, and a
 * bundle no trusted key signed before its registry is: it costs at most the parse of a manifest
 * (manifestMaxBytes). A BundleError names the check that failed.
 */
export function checkBundle(files: BundleFiles, trusted: KeyObject[]): CheckedBundle {
  ensureSizes(files);
  const manifest = signedManifest(files, trusted);
  if (sha256(files.wasm) !== manifest.wasm_sha256)
    throw new BundleError('policy.wasm does not match the manifest');
  // Its own memory would be allocated at its size, past the bound of the one we give it (wasm-memory.ts).
  if (declaresOwnMemory(files.wasm))
    throw new BundleError('policy.wasm declares its own memory; an OPA policy imports env.memory');
  if (sha256(files.registry) !== manifest.registry_sha256)
    throw new BundleError('registry.json does not match the manifest');
  const registry = parsed(files.registry, 'purpose registry');
  if (!checkRegistry.Check(registry)) throw new BundleError('purpose registry is malformed');
  if (!verifyDocument(registry, trusted)) throw new BundleError('purpose registry signature does not verify');
  if (registry.version !== manifest.registry_version)
    throw new BundleError('registry version differs from the manifest');
  return { manifest, registry, routes: routeTableOf(manifest, files.routes) };
}

/** Verify (checkBundle) and instantiate a bundle from its files. */
export async function instantiateBundle(
  files: BundleFiles,
  trusted: KeyObject[],
  opts: InstantiateOptions = {},
): Promise<PolicyRevision> {
  const { manifest, registry, routes } = checkBundle(files, trusted);
  const memory = opts.maxMemoryPages ? { initial: 5, maximum: opts.maxMemoryPages } : undefined;
  const policy = await loadedPolicy(files.wasm, memory, {
    registry,
    meta: { policy_version: manifest.policy_version },
  });
  const reg = registry;
  const entrypoints = policy.entrypoints as Record<string, number>;
  const traced = entrypoints[manifest.entrypoint] ?? 0;
  const entry = entrypoints[verdictEntrypoint] ?? traced;
  const run = evaluatorOf(policy);
  return {
    policyVersion: manifest.policy_version,
    files,
    registryVersion: reg.version,
    registry: reg,
    routes,
    routesSha256: routes ? manifest.routes_sha256 : undefined,
    // Ranges the WASM cannot read are handed over as no range (shared/ip-ranges.ts inputForPolicy).
    evaluate(input) {
      return decisionOf(run(inputText(input), traced));
    },
    evaluateJson(inputJson) {
      return decisionOf(run(inputJson, traced));
    },
    decide(input) {
      return verdictOf(run(inputText(input), entry));
    },
    decideJson(inputJson) {
      return verdictOf(run(inputJson, entry));
    },
  };
}

/**
 * A response's body, read no further than its file's bound (fileMaxBytes): past it the response is
 * abandoned and the file refused as checkBundle refuses it. Read whole, a source (or whoever answers for it on the
 * way) streaming a file without end grew the reading process's memory until it died, the bounds
 * checked only once the file had arrived.
 */
async function boundedBody(res: Dispatcher.ResponseData, name: string): Promise<Buffer> {
  const max = fileMaxBytes[name] ?? 0;
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    if (Number(res.headers['content-length']) > max) throw tooLarge(name, max);
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > max) throw tooLarge(name, max);
      chunks.push(chunk as Buffer);
    }
  } catch (err) {
    res.body.destroy();
    throw err;
  }
  return Buffer.concat(chunks, size);
}

/**
 * How long one file of a bundle may take to arrive from an http(s) source, its answer and its
 * body in all (the development bundle's take milliseconds). undici's own timeouts are per quiet
 * spell (300 s each): a source answering a byte now and then held a read for hours.
 */
export const bundleFileReadMs = 15_000;

/** A source's read abandoned past its deadline: the source failing, not the bundle's answer. */
async function withinDeadline<T>(
  name: string,
  readMs: number,
  read: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const signal = AbortSignal.timeout(readMs);
  try {
    return await read(signal);
  } catch (err) {
    if (signal.aborted) throw new Error(`GET ${name}: not read within ${readMs} ms`);
    throw err;
  }
}

/** Reads one file of a bundle from a directory (policy/dist layout) or an http(s) URL (each within `readMs`). */
export function bundleFileReader(
  source: string,
  readMs = bundleFileReadMs,
): (name: string) => Promise<Buffer> {
  return /^https?:\/\//.test(source)
    ? (name: string) => withinDeadline(name, readMs, (signal) => readHttp(source, name, signal))
    : (name: string) =>
        readFile(join(source, name)).catch((err: unknown) => {
          // A file that is not there is the bundle's answer; another I/O error is the source failing.
          if ((err as { code?: unknown }).code === 'ENOENT')
            throw new BundleError(`${name} is not in the bundle`);
          throw err;
        });
}

/** One file of a bundle from an http(s) source, read until `signal` aborts. */
async function readHttp(source: string, name: string, signal: AbortSignal): Promise<Buffer> {
  const res = await request(new URL(name, source.endsWith('/') ? source : `${source}/`), { signal });
  if (res.statusCode !== 200) {
    await res.body.dump();
    // Not there is the bundle's (or the ref's) answer; any other status is the source failing.
    const message = `GET ${name}: HTTP ${res.statusCode}`;
    throw res.statusCode === 404 || res.statusCode === 410 ? new BundleError(message) : new Error(message);
  }
  return boundedBody(res, name);
}

/** The SHA-256 of a source's manifest: equal digests name the same (signed) bundle. */
export async function manifestDigest(source: string): Promise<string> {
  return sha256(await bundleFileReader(source)('manifest.json'));
}

/** Whether a manifest (not yet verified: instantiateBundle does that) names a route table. */
function namesRoutes(manifest: Buffer): boolean {
  // Past its bound it is refused unparsed (checkBundle), whatever it names.
  if (manifest.length > manifestMaxBytes) return false;
  try {
    const m: unknown = JSON.parse(manifest.toString('utf8'));
    return typeof m === 'object' && m !== null && 'routes_sha256' in m;
  } catch {
    return false;
  }
}

/**
 * Load from a directory (policy/dist layout) or an http(s) URL serving the same files: the
 * route table too whenever the manifest names one, so a bundle source cannot withhold it.
 */
export async function loadBundle(source: string, trusted: KeyObject[]): Promise<PolicyRevision> {
  const get = bundleFileReader(source);
  const [manifest, registry, wasm] = await Promise.all([
    get('manifest.json'),
    get('registry.json'),
    get('policy.wasm'),
  ]);
  const routes = namesRoutes(manifest) ? await get('routes.json') : undefined;
  return instantiateBundle({ manifest, registry, wasm, routes }, trusted);
}
