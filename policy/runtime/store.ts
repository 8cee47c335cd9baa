/**
 * Policy revisions of one process (each edge, and each core for simulate, keeps its own): one
 * current revision, swapped atomically when a newer bundle verifies, and the last
 * `keepRevisions` kept by policy version for `policy_ref`. A bundle that fails verification never
 * replaces the current one. A `policy_ref` this process never saw (it started later, or it is a
 * core asked about an edge's decision) is fetched from the bundle source's
 * `revisions/<policy_version>/`, where a release keeps every bundle it shipped
 * (`npx tsx policy/build.ts --keep-revision`).
 */
import type { KeyObject } from 'node:crypto';
import type { Logger } from 'pino';
import {
  BundleError,
  type BundleFiles,
  type CheckedBundle,
  checkBundle,
  loadBundle,
  manifestDigest,
  type PolicyRevision,
} from './bundle.ts';

export const keepRevisions = 5;
/** Revisions fetched by ref and kept (simulate of old decisions); oldest dropped first. */
export const keepFetchedRevisions = 20;
/** A policy version names a directory: nothing but these characters (no `..`, no `/`). */
const refPattern = /^[A-Za-z0-9_-]{1,64}$/;

/** Where the bundle of policy version `ref` lives in a source (directory or http(s) URL). */
export function revisionSource(source: string, ref: string): string {
  return `${source.replace(/\/+$/, '')}/revisions/${ref}/`;
}
/** How often a bundle source is re-read for a new version. */
export const bundlePollMs = 2000;

export class PolicyStore {
  private currentRevision: PolicyRevision | undefined;
  private readonly revisions = new Map<string, PolicyRevision>();
  private readonly fetched = new Map<string, PolicyRevision>();
  private source: string | undefined;
  /** Digest of the manifest last loaded from `source`: an unchanged one is not fetched and verified again. */
  private loadedManifest: string | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly trusted: KeyObject[],
    private readonly log?: Logger,
  ) {}

  /** The signers this store trusts (a worker thread verifying bundles on its behalf needs them). */
  get trustedKeys(): readonly KeyObject[] {
    return this.trusted;
  }

  /** The revision decisions use now; undefined until one has loaded (then every Check denies). */
  get current(): PolicyRevision | undefined {
    return this.currentRevision;
  }

  /** A kept revision by policy version, or the current one when `ref` is empty. */
  get(ref?: string): PolicyRevision | undefined {
    if (!ref) return this.currentRevision;
    return this.revisions.get(ref);
  }

  /**
   * A revision by `policy_ref`: kept in memory, or fetched (verified like any bundle) from the
   * source's `revisions/<ref>/`; undefined when neither has it (or the source's is no verified
   * bundle). A source that cannot be read throws.
   */
  async resolve(ref?: string): Promise<PolicyRevision | undefined> {
    const kept = this.get(ref) ?? (ref ? this.fetched.get(ref) : undefined);
    if (kept || !ref || !this.source || !refPattern.test(ref)) return kept;
    let rev: PolicyRevision;
    try {
      rev = await loadBundle(revisionSource(this.source, ref), this.trusted);
    } catch (err) {
      // The source could not be read (I/O, a server error): the revision may well be there, so
      // the failure goes up as the service's, never as an unknown ref.
      if (!(err instanceof BundleError)) throw err;
      this.log?.debug({ ref, err: err.message }, 'policy revision not found in the bundle source');
      return undefined;
    }
    if (rev.policyVersion !== ref) return undefined;
    this.fetched.set(ref, rev);
    if (this.fetched.size > keepFetchedRevisions)
      this.fetched.delete(this.fetched.keys().next().value as string);
    return rev;
  }

  /**
   * Check a bundle given as its three files (a candidate uploaded for impact analysis, issue 22)
   * against this store's trusted keys, running none of its WASM (checkBundle): the caller loads
   * that off its event loop (core/policy/candidates.ts). It is not installed.
   */
  async verify(files: BundleFiles): Promise<CheckedBundle> {
    return checkBundle(files, this.trusted);
  }

  versions(): string[] {
    return [...this.revisions.keys()];
  }

  /** Install an already verified revision as current. */
  install(rev: PolicyRevision): void {
    this.revisions.delete(rev.policyVersion);
    this.revisions.set(rev.policyVersion, rev);
    while (this.revisions.size > keepRevisions) {
      const oldest = this.revisions.keys().next().value as string;
      this.revisions.delete(oldest);
    }
    this.currentRevision = rev;
  }

  /** Load, verify and install from a directory or URL; throws (keeping the current one) on failure. */
  async load(source: string): Promise<PolicyRevision> {
    // The poll reads the manifest alone while nothing changed: re-verifying and re-instantiating the
    // WASM every 2 s cost the thread that answers Checks ~5 ms each time.
    const digest = await manifestDigest(source);
    if (source === this.source && digest === this.loadedManifest && this.currentRevision)
      return this.currentRevision;
    this.source = source;
    const rev = await loadBundle(source, this.trusted);
    this.loadedManifest = digest;
    if (
      rev.policyVersion !== this.currentRevision?.policyVersion ||
      rev.registryVersion !== this.currentRevision.registryVersion ||
      rev.routesSha256 !== this.currentRevision.routesSha256
    ) {
      this.install(rev);
      this.log?.info(
        { policyVersion: rev.policyVersion, registryVersion: rev.registryVersion },
        'policy bundle installed',
      );
    }
    return rev;
  }

  /**
   * Re-read `source` every `intervalMs`; new verified bundles are swapped in without a restart. A
   * tick while the last read is still under way starts none: a source slow to answer (each file
   * within bundleFileReadMs) had a new read begun every 2 s, each holding its connection open.
   */
  watch(source: string, intervalMs = bundlePollMs): void {
    this.stop();
    let reading = false;
    this.timer = setInterval(() => {
      if (reading) return;
      reading = true;
      this.load(source)
        .catch((err: unknown) =>
          this.log?.warn({ err: (err as Error).message }, 'policy bundle refused; keeping the current one'),
        )
        .finally(() => {
          reading = false;
        });
    }, intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
