/**
 * Shadow evaluation thread (issue 22 item 3; ShadowFeed in shadow.ts): evaluates live decisions'
 * inputs against each tenant's shadow candidate, after the real answers were sent, and answers
 * each batch with its counts. WASM evaluation is synchronous: a shadow bundle that loops blocks
 * this thread only, and the feed terminates it when a batch is not answered in time; one that
 * allocates without end reaches its instance's memory bound and that evaluation counts as an error.
 * Divergences are written (a bounded sample, inputs scrubbed like recorded decision inputs).
 */
import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { parentPort, workerData } from 'node:worker_threads';
import { instantiateBundle, type PolicyRevision } from '../policy/runtime/bundle.ts';
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
  | { type: 'evaluated'; id: number; evaluated: number; divergent: number; errors: number };

/** Divergences written per tenant and candidate by one thread (the rest are counted only). */
const maxWrittenPerCandidate = 200;

const port = parentPort;
if (!port) throw new Error('shadow-thread.ts runs as a worker thread');
const { url, trusted, key, maxMemoryPages } = workerData as {
  url: string;
  trusted: JsonWebKey[];
  key?: Uint8Array;
  maxMemoryPages: number;
};
const trustedKeys = trusted.map((k) => createPublicKey({ key: k, format: 'jwk' }));
const db = createDb({ connectionString: url, metrics: createMetrics(), log: createLogger('silent'), max: 1 });
const scrubber = key ? new Scrubber(Buffer.from(key)) : undefined;
const shadows = new Map<string, { ref: string; rev?: PolicyRevision; written: number }>();

async function load(tenantId: string, ref: string): Promise<void> {
  const entry = { ref, written: 0 } as { ref: string; rev?: PolicyRevision; written: number };
  shadows.set(tenantId, entry);
  const { rows } = await db.query<{ manifest: Buffer; registry: Buffer; wasm: Buffer }>(
    'SELECT manifest, registry, wasm FROM policy_candidates WHERE tenant_id = $1 AND ref = $2',
    [tenantId, ref],
  );
  const files = rows[0];
  // Verified like any bundle: a shadow that no longer verifies is not evaluated.
  if (files && shadows.get(tenantId) === entry)
    entry.rev = await instantiateBundle(files, trustedKeys, { maxMemoryPages });
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
    for (const [t, ref] of wanted) if (!shadows.has(t)) void load(t, ref).catch(() => shadows.delete(t));
    return;
  }
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
  port.postMessage({
    type: 'evaluated',
    id: m.id,
    evaluated: items.length,
    divergent,
    errors,
  } satisfies FromShadow);
  void writeDivergences(diverged).catch(() => undefined);
});
port.postMessage({ type: 'ready' } satisfies FromShadow);
