/**
 * Core's impact worker (issue 22 item 2: replay "runs off the decision path (a worker), bounded
 * in time and memory"). The runner on core's event loop reads recorded decisions a page at a
 * time and commits progress; this thread only evaluates: it verifies and instantiates the
 * candidate and each baseline revision (its WASM memory bounded), replays a page into the job's
 * result and answers with the result so far. A candidate that loops blocks this thread alone
 * (the runner terminates it past the job's budget); one that allocates without end fails its
 * own evaluations (counted as errors) at the WASM bound; this thread's heap is bounded by the
 * runner's `resourceLimits`.
 */
import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import {
  BundleError,
  type BundleFiles,
  instantiateBundle,
  type PolicyRevision,
} from '../../policy/runtime/bundle.ts';
import { boundJsonParse, silenceConsole } from '../../policy/runtime/candidate-thread.ts';
import { type ImpactResult, type InputRow, replayOne, Tally } from './replay.ts';

/** Baseline revisions one job instantiates; a recorded decision of any further version is compared with its recorded verdict. */
export const maxBaselinesPerJob = 16;

export type ToImpact =
  | { type: 'job'; id: string; candidate: BundleFiles; result: ImpactResult }
  /** A candidate being uploaded: loaded as a job would load it, answered, and not kept. */
  | { type: 'load'; id: string; candidate: BundleFiles }
  | { type: 'page'; id: string; baselines: { ref: string; files: BundleFiles | null }[]; rows: InputRow[] };
export type FromImpact =
  | { type: 'ready' }
  | { type: 'loaded'; id: string }
  /** The candidate is at fault (a BundleError): the job fails with the reason. */
  | { type: 'refused'; id: string; reason: string }
  /** This thread is (the WASM runtime short of memory, say): the job is not the candidate's failure. */
  | { type: 'unavailable'; id: string; reason: string }
  | { type: 'paged'; id: string; result: ImpactResult };

export interface ImpactThreadData {
  trusted: JsonWebKey[];
  maxMemoryPages: number;
}

const port = parentPort;
if (!port) throw new Error('impact-thread.ts runs as a worker thread');

// A candidate's JSON is bounded here (policy/runtime/candidate-thread.ts); nothing else here
// parses JSON but the bundle's manifest and registry, far smaller.
boundJsonParse();
// What a candidate prints (opa_println) is not written to this process's log stream.
silenceConsole();
const { trusted, maxMemoryPages } = workerData as ImpactThreadData;
const trustedKeys = trusted.map((k) => createPublicKey({ key: k, format: 'jwk' }));

/** Buffers arrive as plain Uint8Arrays (structured clone); the verifier reads them as Buffers. */
const asBuffer = (u: Uint8Array) => Buffer.from(u.buffer, u.byteOffset, u.byteLength);
const filesOf = (f: BundleFiles): BundleFiles => ({
  manifest: asBuffer(f.manifest),
  registry: asBuffer(f.registry),
  wasm: asBuffer(f.wasm),
});
const instantiate = (f: BundleFiles) => instantiateBundle(filesOf(f), trustedKeys, { maxMemoryPages });

let job:
  | {
      id: string;
      candidate: PolicyRevision;
      tally: Tally;
      baselines: Map<string, PolicyRevision | undefined>;
    }
  | undefined;

/**
 * The candidate of `m` loaded here: its revision, or the answer that refuses it (a BundleError: its
 * reason is the check that failed, after `refusedAs`) or says we could not.
 */
async function loaded(
  m: { id: string; candidate: BundleFiles },
  refusedAs: string,
): Promise<PolicyRevision | FromImpact> {
  try {
    return await instantiate(m.candidate);
  } catch (err) {
    // The verifier's messages name the failed check (signature, hash, shape); they carry no secret.
    if (err instanceof BundleError)
      return { type: 'refused', id: m.id, reason: `${refusedAs}${err.message}` };
    const reason = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    return { type: 'unavailable', id: m.id, reason: reason.slice(0, 200) };
  }
}

const isAnswer = (r: PolicyRevision | FromImpact): r is FromImpact => 'type' in r;

async function start(m: Extract<ToImpact, { type: 'job' }>): Promise<FromImpact> {
  job = undefined;
  const candidate = await loaded(m, 'the candidate does not verify: ');
  if (isAnswer(candidate)) return candidate;
  job = { id: m.id, candidate, tally: new Tally(m.result), baselines: new Map() };
  return { type: 'loaded', id: m.id };
}

/** An uploaded candidate's WASM loaded off core's event loop (core/policy/candidates.ts), then dropped. */
async function load(m: Extract<ToImpact, { type: 'load' }>): Promise<FromImpact> {
  const candidate = await loaded(m, '');
  return isAnswer(candidate) ? candidate : { type: 'loaded', id: m.id };
}

async function page(m: Extract<ToImpact, { type: 'page' }>): Promise<FromImpact> {
  const j = job;
  if (!j || j.id !== m.id)
    return { type: 'refused', id: m.id, reason: 'the job was not started on this thread' };
  for (const b of m.baselines) {
    if (j.baselines.has(b.ref)) continue;
    // A revision that no longer verifies is no baseline: its recorded verdict stands in for it.
    const rev =
      b.files && j.baselines.size < maxBaselinesPerJob
        ? await instantiate(b.files).catch(() => undefined)
        : undefined;
    j.baselines.set(b.ref, rev);
  }
  for (const row of m.rows) replayOne(row, j.candidate, (ref) => j.baselines.get(ref), j.tally);
  return { type: 'paged', id: m.id, result: j.tally.result };
}

port.on('message', (m: ToImpact) => {
  void (m.type === 'job' ? start(m) : m.type === 'load' ? load(m) : page(m)).then((reply) =>
    port.postMessage(reply),
  );
});
port.postMessage({ type: 'ready' } satisfies FromImpact);
