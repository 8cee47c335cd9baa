/**
 * The edge's policy revisions: one current revision, swapped atomically when a newer bundle
 * verifies, and the last `keepRevisions` kept by policy version for `policy_ref`. A bundle
 * that fails verification never replaces the current one.
 */
import type { KeyObject } from 'node:crypto';
import type { Logger } from 'pino';
import { loadBundle, type PolicyRevision } from './bundle.ts';

export const keepRevisions = 5;
/** How often a bundle source is re-read for a new version. */
export const bundlePollMs = 2000;

export class PolicyStore {
  private currentRevision: PolicyRevision | undefined;
  private readonly revisions = new Map<string, PolicyRevision>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly trusted: KeyObject[], private readonly log?: Logger) {}

  /** The revision decisions use now; undefined until one has loaded (then every Check denies). */
  get current(): PolicyRevision | undefined {
    return this.currentRevision;
  }

  /** A kept revision by policy version, or the current one when `ref` is empty. */
  get(ref?: string): PolicyRevision | undefined {
    if (!ref) return this.currentRevision;
    return this.revisions.get(ref);
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
    const rev = await loadBundle(source, this.trusted);
    if (rev.policyVersion !== this.currentRevision?.policyVersion || rev.registryVersion !== this.currentRevision.registryVersion) {
      this.install(rev);
      this.log?.info({ policyVersion: rev.policyVersion, registryVersion: rev.registryVersion }, 'policy bundle installed');
    }
    return rev;
  }

  /** Re-read `source` every `intervalMs`; new verified bundles are swapped in without a restart. */
  watch(source: string, intervalMs = bundlePollMs): void {
    this.stop();
    this.timer = setInterval(() => {
      this.load(source).catch((err: unknown) => this.log?.warn({ err: (err as Error).message }, 'policy bundle refused; keeping the current one'));
    }, intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
