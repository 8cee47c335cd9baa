/**
 * Shadow mode (issue 22 item 3): a tenant's candidate bundle evaluated against the tenant's live
 * decisions, on a worker thread (shadow-thread.ts), after the real answer was sent. The Check
 * only hands over a reference (and only for tenants with a shadow); batches cross as JSON text
 * every `shadowFlushMs`. Nothing the shadow does reaches a live answer: the queue is bounded
 * (past it decisions are counted as dropped), a batch not answered within `timeoutMs` or a
 * candidate not loaded within candidateLoadMs (a looping bundle) terminates the thread, and a
 * thread that throws is replaced on the next batch. A batch holds one tenant's decisions (and at
 * most the JSON the thread parses), and a tenant whose batch or load timed out is set aside until
 * its shadow changes, its candidate not loaded again: one tenant's looping candidate must not
 * blind every other tenant's shadow. So is a tenant whose candidate ends the thread (its heap
 * bound) while its load or batch runs. A change back to a candidate set aside within
 * shadowSetAsideMs leaves it aside: a tenant alternating between two looping candidates ended the
 * thread at each change, every tenant's candidate loaded again on the next one. The thread says
 * when a load and a batch start: a batch that waits behind a load that hangs is not its tenant's
 * fault, and the load's deadline decides.
 * Promoting a shadow is the ordinary hot swap of the bundle.
 */
import type { KeyObject } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { candidateLoadMs, maxJsonTextChars } from '../policy/runtime/candidate-thread.ts';
import type { Db } from '../shared/db/pool.ts';
import { takeBatch } from './shadow-batch.ts';
import type { FromShadow, ShadowItem, ToShadow } from './shadow-thread.ts';

export const shadowFlushMs = 50;
/** How long a candidate set aside is not loaded again, whatever its tenant's shadow does meanwhile. */
export const shadowSetAsideMs = 10 * 60_000;
/** Candidates remembered as set aside per tenant (a tenant stores at most 20: maxCandidatesPerTenant). */
const setAsideMaxPerTenant = 20;
/** A batch not answered by then (ShadowFeedOptions.timeoutMs): its candidate is taken to hang. */
export const shadowBatchTimeoutMs = 2000;
export const shadowBatchMax = 256;
/** How often the edge re-reads which tenants have a shadow (policy_shadows, migration 0911). */
export const shadowPollMs = 2000;
/** The shadow thread's V8 heap bound (a batch of inputs and the bookkeeping fit well inside). */
export const shadowHeapMb = 256;
/**
 * Linear memory of each shadow bundle's WASM instance (64 KiB pages: 1024 = 64 MiB). The heap
 * bound does not cover WASM memory; past this a candidate's evaluation aborts and is counted in
 * `errors`, instead of growing the edge process towards 4 GiB per tenant with a shadow.
 */
export const shadowWasmMaxPages = 1024;
/** A batch's JSON text at most: the thread parses nothing longer (candidate-thread.ts). */
export const shadowBatchMaxChars = maxJsonTextChars;

export interface ShadowStats {
  evaluated: number;
  divergent: number;
  errors: number;
  dropped: number;
  timeouts: number;
  active: number;
  /** Threads a candidate ended (past the heap bound) while it loaded or evaluated: set aside as a timeout is. */
  ended: number;
  /** Tenants whose shadow timed out or ended its thread, set aside until their shadow changes (their decisions count as dropped). */
  suspended: number;
}

export interface ShadowFeedOptions {
  db: Db;
  databaseUrl: string;
  trustedKeys: KeyObject[];
  /** The decision-input key: divergences' inputs are scrubbed with it (none kept without it). */
  inputKey?: Buffer;
  log: Logger;
  /** A batch not answered by then: the thread is terminated (counted in `timeouts`). */
  timeoutMs?: number;
  /** A candidate not loaded by then (candidateLoadMs): the thread is terminated (counted in `timeouts`). */
  loadTimeoutMs?: number;
  maxQueued?: number;
  /** Tests: start something else than shadow-thread.ts. */
  spawn?: () => Worker;
  /** Tests: the clock (ms) shadowSetAsideMs is counted on. */
  now?: () => number;
}

export class ShadowFeed {
  readonly stats: ShadowStats = {
    evaluated: 0,
    divergent: 0,
    errors: 0,
    dropped: 0,
    timeouts: 0,
    ended: 0,
    active: 0,
    suspended: 0,
  };
  private shadows: [string, string][] = [];
  private readonly tenants = new Set<string>();
  /** Tenant → its candidates whose batch or load timed out or ended the thread → until when (ms) each is set aside. */
  private readonly setAside = new Map<string, Map<string, number>>();
  /** Tenants whose shadow is a candidate set aside: their decisions are dropped, the candidate not loaded. */
  private readonly suspended = new Set<string>();
  private queue: ShadowItem[] = [];
  private worker: Worker | undefined;
  /** The thread said it is ready: only then does a batch's timeout start (booting is not looping). */
  private ready = false;
  /** The batch sent; `started` once the thread said it evaluates it. */
  private inFlight:
    | { id: number; timer: NodeJS.Timeout; size: number; tenant: string; started: boolean }
    | undefined;
  /** The candidate the thread said it loads, until it says the load ended. */
  private loading: { tenant: string; ref: string; timer: NodeJS.Timeout } | undefined;
  private seq = 0;
  private timers: NodeJS.Timeout[] = [];

  constructor(private readonly opts: ShadowFeedOptions) {}

  /** Whether the tenant's decisions are offered to a shadow (one Set lookup on the Check). */
  wants(tenantId: string): boolean {
    return this.tenants.has(tenantId);
  }

  /** Hand over a decision already answered; never blocks and never throws. */
  offer(item: ShadowItem): void {
    if (!this.tenants.has(item.t)) return;
    if (this.suspended.has(item.t) || this.queue.length >= (this.opts.maxQueued ?? 5000)) {
      this.stats.dropped += 1;
      return;
    }
    this.queue.push(item);
  }

  /** Set the tenants' shadows (tenant → candidate ref); the thread loads what is new. */
  setShadows(list: [string, string][]): void {
    this.shadows = list;
    this.tenants.clear();
    for (const [t] of list) this.tenants.add(t);
    this.suspended.clear();
    const now = this.now();
    for (const [t, refs] of this.setAside) {
      for (const [ref, until] of refs) if (until <= now) refs.delete(ref);
      if (refs.size === 0) this.setAside.delete(t);
    }
    for (const [t, ref] of list) if (this.setAside.get(t)?.has(ref)) this.suspended.add(t);
    this.stats.suspended = this.suspended.size;
    this.stats.active = list.length;
    if (list.length === 0) this.queue = [];
    this.post({ type: 'shadows', list: this.loadable() });
  }

  /** The shadows the thread loads: none set aside (a candidate that looped loading would loop again). */
  private loadable(): [string, string][] {
    return this.shadows.filter(([t]) => !this.suspended.has(t));
  }

  async refresh(): Promise<void> {
    const { rows } = await this.opts.db.query<{ tenant_id: string; candidate_ref: string }>(
      'SELECT tenant_id, candidate_ref FROM policy_shadows ORDER BY tenant_id',
    );
    const list = rows.map((r): [string, string] => [r.tenant_id, r.candidate_ref]);
    if (JSON.stringify(list) !== JSON.stringify(this.shadows)) this.setShadows(list);
  }

  start(): void {
    const poll = setInterval(() => {
      this.refresh().catch((err: unknown) =>
        this.opts.log.debug({ err: (err as Error).message }, 'shadow list not read; keeping the last one'),
      );
    }, shadowPollMs);
    const flush = setInterval(() => this.flush(), shadowFlushMs);
    for (const t of [poll, flush]) t.unref();
    this.timers = [poll, flush];
    void this.refresh().catch(() => undefined);
  }

  private spawn(): Worker {
    const trusted = this.opts.trustedKeys.map((k) => k.export({ format: 'jwk' }));
    const w =
      this.opts.spawn?.() ??
      new Worker(new URL('./shadow-thread-boot.mjs', import.meta.url), {
        workerData: {
          url: this.opts.databaseUrl,
          trusted,
          maxMemoryPages: shadowWasmMaxPages,
          ...(this.opts.inputKey ? { key: this.opts.inputKey } : {}),
        },
        // A candidate that allocates without bound ends this thread (an 'exit', replaced on the
        // next batch), never the edge process that answers Checks.
        resourceLimits: { maxOldGenerationSizeMb: shadowHeapMb, maxYoungGenerationSizeMb: 32 },
      });
    w.unref();
    w.on('message', (m: FromShadow) => {
      if (this.worker === w) this.heard(w, m);
    });
    w.on('error', (err) => this.ended(w, err));
    w.on('exit', () => this.ended(w));
    w.postMessage({ type: 'shadows', list: this.loadable() } satisfies ToShadow);
    return w;
  }

  /** What the current thread says: ready, a load started or ended, a batch started or answered. */
  private heard(w: Worker, m: FromShadow): void {
    if (m.type === 'ready') {
      this.ready = true;
      this.flush();
    } else if (m.type === 'loading') {
      if (this.loading) clearTimeout(this.loading.timer);
      const { t: tenant, ref } = m;
      const timer = this.after(this.opts.loadTimeoutMs ?? candidateLoadMs, () =>
        this.loadOverdue(w, tenant, ref),
      );
      this.loading = { tenant, ref, timer };
    } else if (m.type === 'loaded') {
      // The thread loads one candidate at a time: this ends the load it said it started.
      if (this.loading) clearTimeout(this.loading.timer);
      this.loading = undefined;
      if (m.refused !== undefined)
        this.opts.log.warn(
          { tenantId: m.t, candidate: m.ref, reason: m.refused },
          'shadow candidate not loaded',
        );
    } else if (m.type === 'evaluating') {
      if (this.inFlight?.id === m.id) this.inFlight.started = true;
    } else if (this.inFlight?.id === m.id) {
      clearTimeout(this.inFlight.timer);
      this.inFlight = undefined;
      this.stats.evaluated += m.evaluated;
      this.stats.divergent += m.divergent;
      this.stats.errors += m.errors;
    }
  }

  private get batchTimeoutMs(): number {
    return this.opts.timeoutMs ?? shadowBatchTimeoutMs;
  }

  private after(ms: number, run: () => void): NodeJS.Timeout {
    const timer = setTimeout(run, ms);
    timer.unref();
    return timer;
  }

  /**
   * A batch not answered in time: its tenant's candidate hangs, unless the thread has not started
   * the batch because it is loading a candidate; then the load's deadline decides, and the batch
   * waits another `timeoutMs`.
   */
  private batchOverdue(w: Worker, id: number): void {
    const batch = this.inFlight;
    if (this.worker !== w || batch?.id !== id) return;
    if (!batch.started && this.loading) {
      batch.timer = this.after(this.batchTimeoutMs, () => this.batchOverdue(w, id));
      return;
    }
    this.stats.timeouts += 1;
    this.suspend(batch.tenant, 'did not answer in time');
    this.discard(w);
  }

  /**
   * A candidate not loaded in time: it hangs while loading, unless the thread is evaluating a
   * batch (that began during one of the load's awaits); then the batch's deadline decides.
   */
  private loadOverdue(w: Worker, tenant: string, ref: string): void {
    const load = this.loading;
    if (this.worker !== w || load?.tenant !== tenant || load.ref !== ref) return;
    if (this.inFlight?.started) {
      load.timer = this.after(this.batchTimeoutMs, () => this.loadOverdue(w, tenant, ref));
      return;
    }
    this.stats.timeouts += 1;
    this.suspend(tenant, 'did not load in time', ref);
    this.discard(w);
  }

  /**
   * The thread ended of itself: past its heap bound (ERR_WORKER_OUT_OF_MEMORY), a candidate
   * allocating while it ran. Whose candidate ran is known as for a timeout: the batch it said it
   * evaluates, else the load it said it started; that tenant is set aside. Left alone, each new
   * thread loaded the same candidate and ended again, and every tenant whose candidate loads after
   * it was never evaluated (each decision counted as evaluated, `not_loaded`). With none of them
   * running, the next batch starts a new thread.
   */
  private ended(w: Worker, err?: Error): void {
    if (this.worker !== w) return;
    const batch = this.inFlight?.started ? this.inFlight : undefined;
    const load = this.loading;
    const how = (err as { code?: unknown } | undefined)?.code;
    const why = (doing: string) => `ended the shadow thread while ${doing}${how ? ` (${String(how)})` : ''}`;
    if (batch || load) this.stats.ended += 1;
    if (batch) this.suspend(batch.tenant, why('evaluating'));
    else if (load) this.suspend(load.tenant, why('loading'), load.ref);
    this.discard(w);
  }

  /** Forget a thread that died or hung; its batch in flight is lost (counted as dropped). */
  private discard(w: Worker): void {
    if (this.worker !== w) return;
    this.worker = undefined;
    this.ready = false;
    if (this.inFlight) {
      clearTimeout(this.inFlight.timer);
      this.stats.dropped += this.inFlight.size;
      this.inFlight = undefined;
    }
    if (this.loading) clearTimeout(this.loading.timer);
    this.loading = undefined;
    void w.terminate();
  }

  private post(m: ToShadow): void {
    this.worker?.postMessage(m);
  }

  /** Send the next batch when none is in flight (also called by the timer). */
  flush(): void {
    if (this.inFlight || this.queue.length === 0) return;
    if (!this.worker) {
      this.worker = this.spawn();
      this.ready = false;
    }
    if (!this.ready) return;
    const w = this.worker;
    const { batch, rest, dropped } = takeBatch(this.queue, shadowBatchMax, shadowBatchMaxChars);
    this.queue = rest;
    this.stats.dropped += dropped;
    if (!batch) return;
    const id = ++this.seq;
    const timer = this.after(this.batchTimeoutMs, () => this.batchOverdue(w, id));
    this.inFlight = { id, timer, size: batch.size, tenant: batch.tenant, started: false };
    w.postMessage({ type: 'eval', id, items: batch.items } satisfies ToShadow);
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  /**
   * Set a tenant's shadow (`ref`, when it is still the one) aside after it timed out or ended the
   * thread: until the tenant's shadow changes, and for shadowSetAsideMs should it change back.
   */
  private suspend(tenant: string, why: string, only?: string): void {
    const ref = this.shadows.find(([t]) => t === tenant)?.[1];
    if (ref === undefined || (only !== undefined && ref !== only)) return;
    const refs = this.setAside.get(tenant) ?? new Map<string, number>();
    refs.delete(ref);
    refs.set(ref, this.now() + shadowSetAsideMs);
    if (refs.size > setAsideMaxPerTenant) refs.delete(refs.keys().next().value as string);
    this.setAside.set(tenant, refs);
    this.suspended.add(tenant);
    this.stats.suspended = this.suspended.size;
    const before = this.queue.length;
    this.queue = this.queue.filter((item) => item.t !== tenant);
    this.stats.dropped += before - this.queue.length;
    this.opts.log.warn(
      { tenantId: tenant, candidate: ref },
      `shadow candidate ${why}; set aside until the shadow changes`,
    );
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    if (this.inFlight) clearTimeout(this.inFlight.timer);
    if (this.loading) clearTimeout(this.loading.timer);
    const w = this.worker;
    this.worker = undefined;
    this.ready = false;
    await w?.terminate();
  }
}
