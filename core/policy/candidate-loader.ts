/**
 * An uploaded candidate's WASM loaded once, as its replays will load it (impact-thread.ts: a
 * worker thread, the same heap and WASM memory bounds), never on core's event loop: loading runs
 * the module's own code (its start function, `builtins`, `entrypoints`, its allocator and JSON
 * parser), and a module that loops there held core's event loop for ever. One load at a time per
 * core, on one thread kept for the next upload while uploads come, and one waiting or running per
 * tenant (429 past it): one tenant's uploads do not queue ahead of another's.
 */
import { BundleError, type BundleFiles } from '../../policy/runtime/bundle.ts';
import { candidateLoadMs } from '../../policy/runtime/candidate-thread.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import { AppError } from '../../shared/errors.ts';
import { ImpactWorker, ImpactWorkerError, impactHeapMb } from './impact-worker.ts';

/** How long a verification waits for its worker thread to start (loading tsx and the runtime) on a busy machine. */
const workerStartMs = 60_000;

/** One candidate's WASM loading at a time per core, on one thread (its heap, its WASM memory) kept for the next upload. */
let loading: Promise<unknown> = Promise.resolve();
let loader: { worker: ImpactWorker; policies: PolicyStore; idle: NodeJS.Timeout | undefined } | undefined;
/** A loader thread unused this long is stopped (its memory with it); the next upload starts one. */
const loaderIdleMs = 30_000;

/** The loader thread for `policies`' signers, started when there is none or the last one ended (a load that hung ends it). */
function loaderThread(policies: PolicyStore): ImpactWorker {
  if (loader?.idle) clearTimeout(loader.idle);
  if (loader && (loader.worker.ended || loader.policies !== policies)) {
    void loader.worker.stop();
    loader = undefined;
  }
  loader ??= { worker: new ImpactWorker({ trustedKeys: policies.trustedKeys }), policies, idle: undefined };
  return loader.worker;
}

/** After a load: the thread stops once idle for loaderIdleMs. */
function idleLoader(): void {
  const l = loader;
  if (!l) return;
  l.idle = setTimeout(() => {
    if (loader === l) loader = undefined;
    void l.worker.stop();
  }, loaderIdleMs);
  l.idle.unref();
}

/**
 * Load the candidate's WASM as its replays will (impact-thread.ts: a worker thread, the same heap
 * and WASM memory bounds), never on core's event loop: loading runs the module's own code.
 * Throws a BundleError for the bundle's faults (it does not load, loops, or outgrows the heap
 * bound), anything else for ours.
 */
async function loadOffThread(policies: PolicyStore, files: BundleFiles): Promise<void> {
  const worker = loaderThread(policies);
  try {
    const reply = await worker.ask(
      { type: 'load', id: 'upload', candidate: files },
      { withinMs: candidateLoadMs, budgetEnd: Date.now() + workerStartMs + candidateLoadMs },
    );
    if (reply.type === 'refused') throw new BundleError(reply.reason);
    if (reply.type !== 'loaded')
      throw new Error(
        `the candidate could not be loaded here: ${'reason' in reply ? reply.reason : reply.type}`,
      );
  } catch (err) {
    if (!(err instanceof ImpactWorkerError)) throw err;
    if (err.kind === 'page')
      throw new BundleError(`policy.wasm did not load within ${candidateLoadMs / 1000} s`);
    if (err.kind === 'memory')
      throw new BundleError(`loading policy.wasm went past the worker's heap bound of ${impactHeapMb} MB`);
    throw new Error(`the candidate's worker ${err.kind === 'budget' ? 'did not start in time' : 'stopped'}`);
  } finally {
    idleLoader();
  }
}

/**
 * Tenants with a candidate load waiting or running on this core: one each, so one tenant's
 * uploads cannot queue ahead of another's (each may hold the thread for candidateLoadMs).
 */
const loadingTenants = new Set<string>();

/**
 * Load `files`' WASM, uploaded by `tenantId`, off this thread (after the loads before it); throws
 * what loadOffThread throws, or 429 RATE_LIMITED while the tenant has a load waiting or running here.
 */
export function loadCandidate(policies: PolicyStore, files: BundleFiles, tenantId: string): Promise<void> {
  if (loadingTenants.has(tenantId))
    return Promise.reject(
      new AppError('RATE_LIMITED', 'a candidate of this tenant is being loaded; retry once it is answered', {
        headers: { 'retry-after': String(candidateLoadMs / 1000) },
      }),
    );
  loadingTenants.add(tenantId);
  const turn = loading
    .then(() => loadOffThread(policies, files))
    .finally(() => loadingTenants.delete(tenantId));
  loading = turn.catch(() => undefined);
  return turn;
}
