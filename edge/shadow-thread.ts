/**
 * Shadow evaluation thread (issue 22 item 3; ShadowFeed in shadow.ts): evaluates live decisions'
 * inputs against each tenant's shadow candidate, after the real answers were sent, and answers
 * each batch with its counts. Loading and evaluating a candidate run its WASM synchronously: a
 * shadow bundle that loops blocks this thread only, and the feed terminates it when a batch is not
 * answered in time, or a load not ended within candidateLoadMs (this thread says when each load
 * and each batch starts, so the feed blames the one that hangs). One that allocates without end
 * reaches its instance's memory bound and that evaluation counts as an error; one that answers
 * more JSON than the heap holds parsed is refused at core's impact thread's bound (candidate-thread.ts).
 * Divergences are written (a bounded sample, inputs scrubbed like recorded decision inputs).
 */
import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import { instantiateBundle, type PolicyRevision } from '../policy/runtime/bundle.ts';
import { boundJsonParse, silenceConsole } from '../policy/runtime/candidate-thread.ts';
import { createDb } from '../shared/db/pool.ts';
import { createLogger } from '../shared/log.ts';
import { createMetrics } from '../shared/metrics.ts';
import { Scrubber } from './decision-inputs.ts';

/** One live decision offered to its tenant's shadow. */
export interface ShadowItem {
  t: string;
  input?: unknown;
  /** The input as JSON text instead of `input` (written into the batch as `input`, edge/shadow.ts). */
  inputJson?: string;
  allow: boolean;
  d: string;
  p: string;
  r: string;
}
export type ToShadow =
  | { type: 'shadows'; list: [string, string][] }
  | { type: 'eval'; id: number; items: string };
export type FromShadow =
  | { type: 'ready' }
  /** The tenant's candidate starts to load (its files read): its WASM runs until `loaded`. */
  | { type: 'loading'; t: string; ref: string }
  /** That load ended: loaded, or refused for `refused` (the candidate is not evaluated). */
  | { type: 'loaded'; t: string; ref: string; refused?: string }
  /** The batch starts to evaluate: its candidate's WASM runs until `evaluated`. */
  | { type: 'evaluating'; id: number }
  | { type: 'evaluated'; id: number; evaluated: number; divergent: number; errors: number };

/** Divergences written per tenant and candidate by one thread (the rest are counted only). */
const maxWrittenPerCandidate = 200;

const port = parentPort;
if (!port) throw new Error('shadow-thread.ts runs as a worker thread');
// What a candidate answers is parsed within the bound core's impact thread applies; a batch's
// text is held to it by the feed (shadow.ts).
boundJsonParse();
// What a candidate prints (opa_println) is not written to this process's log stream.
silenceConsole();
const post = (m: FromShadow) => port.postMessage(m);
const { url, trusted, key, maxMemoryPages } = workerData as {
  url: string;
  trusted: JsonWebKey[];
  key?: Uint8Array;
  maxMemoryPages: number;
};
const trustedKeys = trusted.map((k) => createPublicKey({ key: k, format: 'jwk' }));
const db = createDb({ connectionString: url, metrics: createMetrics(), log: createLogger('silent'), max: 1 });
const scrubber = key ? new Scrubber(Buffer.from(key)) : undefined;
type Shadow = { ref: string; rev?: PolicyRevision; written: number };
const shadows = new Map<string, Shadow>();

/** One load at a time: the feed's deadline is for the load it was told of, not for a queue of them. */
let loads: Promise<void> = Promise.resolve();

/** Load the tenant's candidate after the loads before it; a candidate that fails to is forgotten (tried again with the next list). */
function load(tenantId: string, ref: string): void {
  const entry: Shadow = { ref, written: 0 };
  shadows.set(tenantId, entry);
  loads = loads
    .then(() => loadOne(tenantId, entry))
    .catch(() => {
      if (shadows.get(tenantId) === entry) shadows.delete(tenantId);
    });
}

async function loadOne(tenantId: string, entry: Shadow): Promise<void> {
  if (shadows.get(tenantId) !== entry) return;
  const { rows } = await db.query<{ manifest: Buffer; registry: Buffer; wasm: Buffer }>(
    'SELECT manifest, registry, wasm FROM policy_candidates WHERE tenant_id = $1 AND ref = $2',
    [tenantId, entry.ref],
  );
  const files = rows[0];
  if (!files || shadows.get(tenantId) !== entry) return;
  post({ type: 'loading', t: tenantId, ref: entry.ref });
  try {
    // Verified like any bundle: a shadow that no longer verifies is not evaluated.
    entry.rev = await instantiateBundle(files, trustedKeys, { maxMemoryPages });
    post({ type: 'loaded', t: tenantId, ref: entry.ref });
  } catch (err) {
    // The verifier's and loader's messages name what failed; they carry no secret.
    const reason = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    post({ type: 'loaded', t: tenantId, ref: entry.ref, refused: reason.slice(0, 200) });
    throw err;
  }
}

function evaluate(item: ShadowItem): { allow: boolean | null; code: string } {
  const rev = shadows.get(item.t)?.rev;
  if (!rev) return { allow: item.allow, code: 'not_loaded' };
  try {
    const v = rev.decide(item.input);
    return { allow: v.allow, code: v.code };
  } catch {
    return { allow: null, code: 'no_decision' };
  }
}

async function writeDivergences(
  rows: { item: ShadowItem; allow: boolean | null; code: string }[],
): Promise<void> {
  const keep = rows.filter(({ item }) => {
    const s = shadows.get(item.t);
    if (!s || s.written >= maxWrittenPerCandidate) return false;
    s.written += 1;
    return true;
  });
  if (keep.length === 0) return;
  const doc = JSON.stringify(
    keep.map(({ item, allow, code }) => ({
      tenant_id: item.t,
      candidate_ref: shadows.get(item.t)?.ref ?? '',
      decision_id: item.d,
      purpose: item.p,
      route: item.r,
      live_allow: item.allow,
      shadow_allow: allow,
      shadow_code: code,
      input: scrubber ? scrubber.scrub(item.t, item.input) : {},
    })),
  );
  await db.query(
    `INSERT INTO policy_shadow_divergences (tenant_id, candidate_ref, decision_id, purpose, route, live_allow, shadow_allow, shadow_code, input)
     SELECT r->>'tenant_id', r->>'candidate_ref', r->>'decision_id', r->>'purpose', r->>'route', (r->>'live_allow')::boolean,
            (r->>'shadow_allow')::boolean, r->>'shadow_code', r->'input'
     FROM jsonb_array_elements($1::jsonb) r`,
    [doc],
  );
}

port.on('message', (m: ToShadow) => {
  if (m.type === 'shadows') {
    const wanted = new Map(m.list);
    for (const t of [...shadows.keys()]) if (wanted.get(t) !== shadows.get(t)?.ref) shadows.delete(t);
    for (const [t, ref] of wanted) if (!shadows.has(t)) load(t, ref);
    return;
  }
  post({ type: 'evaluating', id: m.id });
  const items = JSON.parse(m.items) as ShadowItem[];
  let divergent = 0;
  let errors = 0;
  const diverged: { item: ShadowItem; allow: boolean | null; code: string }[] = [];
  for (const item of items) {
    const out = evaluate(item);
    if (out.allow === null) errors += 1;
    if (out.allow !== item.allow) {
      divergent += 1;
      diverged.push({ item, ...out });
    }
  }
  post({ type: 'evaluated', id: m.id, evaluated: items.length, divergent, errors });
  void writeDivergences(diverged).catch(() => undefined);
});
post({ type: 'ready' });
