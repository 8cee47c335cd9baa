/**
 * The impact worker as the runner sees it (issue 22 item 2): one thread per core process
 * (impact-thread.ts), asked one thing at a time, each answer awaited until a deadline. Past the
 * deadline, or when the thread dies (its heap bound reached, or anything else), the thread is
 * terminated and the question fails with an ImpactWorkerError naming why; the core process and
 * its event loop are never what stops.
 */
import type { KeyObject } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import type { FromImpact, ImpactThreadData, ToImpact } from './impact-thread.ts';

/** The worker's V8 heap bound: a page of inputs and a bounded result fit well inside. */
export const impactHeapMb = 256;
/**
 * Linear memory of each WASM instance in the worker (64 KiB pages: 1024 = 64 MiB): the
 * development bundle needs well under 1 MiB; a candidate past it fails that evaluation.
 */
export const impactWasmMaxPages = 1024;

/** `page`: an answer not given within its time; `budget`: the job's budget ended first; `memory`: the heap bound. */
export type ImpactWorkerFailure = 'page' | 'budget' | 'memory' | 'ended';

export class ImpactWorkerError extends Error {
  constructor(readonly kind: ImpactWorkerFailure) {
    super(`impact worker ${kind}`);
  }
}

export interface ImpactWorkerOptions {
  trustedKeys: readonly KeyObject[];
  heapMb?: number;
  maxMemoryPages?: number;
  /** Tests: start something else than impact-thread.ts. */
  spawn?: () => Worker;
}

type Waiter = { resolve: (m: FromImpact) => void; reject: (e: ImpactWorkerError) => void };

export class ImpactWorker {
  private readonly worker: Worker;
  private readonly ready: Promise<void>;
  private waiter: Waiter | undefined;
  private failure: ImpactWorkerFailure | undefined;

  constructor(opts: ImpactWorkerOptions) {
    const data: ImpactThreadData = {
      trusted: opts.trustedKeys.map((k) => k.export({ format: 'jwk' })),
      maxMemoryPages: opts.maxMemoryPages ?? impactWasmMaxPages,
    };
    const heapMb = opts.heapMb ?? impactHeapMb;
    this.worker =
      opts.spawn?.() ??
      new Worker(new URL('./impact-thread-boot.mjs', import.meta.url), {
        workerData: data,
        resourceLimits: { maxOldGenerationSizeMb: heapMb, maxYoungGenerationSizeMb: Math.min(32, heapMb) },
      });
    this.worker.unref();
    let readied: () => void = () => undefined;
    this.ready = new Promise((r) => {
      readied = r;
    });
    this.worker.on('message', (m: FromImpact) => {
      if (m.type === 'ready') return readied();
      const w = this.waiter;
      this.waiter = undefined;
      w?.resolve(m);
    });
    this.worker.on('error', (err: Error) => {
      this.fail((err as NodeJS.ErrnoException).code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'ended');
    });
    this.worker.on('exit', () => this.fail('ended'));
  }

  /** Whether the thread is gone (a new one is needed for the next job). */
  get ended(): boolean {
    return this.failure !== undefined;
  }

  private fail(kind: ImpactWorkerFailure): void {
    this.failure ??= kind;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(new ImpactWorkerError(this.failure));
    void this.worker.terminate();
  }

  /**
   * Send `m` and await its answer for `withinMs` once the thread is ready (booting is not
   * looping), and never past `budgetEnd` (epoch ms, booting included); one question at a time.
   */
  async ask(m: ToImpact, limits: { withinMs: number; budgetEnd: number }): Promise<FromImpact> {
    if (this.failure) throw new ImpactWorkerError(this.failure);
    const timers: NodeJS.Timeout[] = [];
    const after = (ms: number, kind: ImpactWorkerFailure) =>
      timers.push(setTimeout(() => this.fail(kind), ms));
    try {
      return await new Promise<FromImpact>((resolve, reject) => {
        this.waiter = { resolve, reject };
        after(Math.max(0, limits.budgetEnd - Date.now()), 'budget');
        void this.ready.then(() => {
          if (this.waiter?.resolve !== resolve) return;
          after(limits.withinMs, 'page');
          this.worker.postMessage(m);
        });
      });
    } finally {
      for (const t of timers) clearTimeout(t);
    }
  }

  async stop(): Promise<void> {
    this.fail('ended');
    await this.worker.terminate();
  }
}
