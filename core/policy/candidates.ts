/**
 * Candidate policy bundles (issue 22 item 2): uploaded by a policy author, verified against the
 * trusted signers exactly like a bundle the edges load (manifest signature, WASM and registry
 * hashes, registry signature), and stored whole in PostgreSQL so any core can replay against
 * it. A candidate is named by its `policy_ref` (`cand-` and the manifest's SHA-256 prefix): the
 * same signed bundle uploaded twice is the same candidate.
 */
import { createHash } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { BundleError, type PolicyRevision } from '../../policy/runtime/bundle.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';

/** The bundle's three files as uploaded: the two JSON documents as their exact text (their hashes are over bytes), the WASM as base64. */
export const CandidateBody = Type.Object(
  {
    manifest: Type.String({ minLength: 2, maxLength: 65_536, description: 'manifest.json, its exact text' }),
    registry: Type.String({
      minLength: 2,
      maxLength: 1_048_576,
      description: 'registry.json, its exact text',
    }),
    wasm: Type.String({
      minLength: 4,
      maxLength: 4_194_304,
      pattern: '^[A-Za-z0-9+/]+={0,2}$',
      description: 'policy.wasm, base64',
    }),
  },
  { additionalProperties: false },
);
export type CandidateBody = Static<typeof CandidateBody>;

/** What the body can weigh at most (the three fields' limits and JSON framing). */
export const candidateBodyLimitBytes = 5_400_000;

export const Candidate = Type.Object({
  policy_ref: Type.String({ pattern: '^cand-[0-9a-f]{16}$' }),
  policy_version: Type.String(),
  registry_version: Type.String(),
  uploaded_by: Type.String(),
  created_at: Type.String({ format: 'date-time' }),
});
export type Candidate = Static<typeof Candidate>;

export const candidateRefOf = (manifest: Buffer): string =>
  `cand-${createHash('sha256').update(manifest).digest('hex').slice(0, 16)}`;

interface Files {
  manifest: Buffer;
  registry: Buffer;
  wasm: Buffer;
}

async function verified(policies: PolicyStore, files: Files): Promise<PolicyRevision> {
  try {
    return await policies.verify(files);
  } catch (err) {
    // The verifier's messages name which check failed (signature, hash, shape); they carry no secret.
    if (err instanceof BundleError) throw new AppError('BUNDLE_INVALID', err.message);
    throw new AppError('BUNDLE_INVALID', 'the candidate is not a loadable policy bundle');
  }
}

/** Verify and store a candidate for `tenantId` (caller's transaction); returns it as stored. */
export async function storeCandidate(
  q: Queryable,
  policies: PolicyStore,
  tenantId: string,
  uploadedBy: string,
  body: CandidateBody,
): Promise<{ candidate: Candidate; created: boolean }> {
  const files = {
    manifest: Buffer.from(body.manifest, 'utf8'),
    registry: Buffer.from(body.registry, 'utf8'),
    wasm: Buffer.from(body.wasm, 'base64'),
  };
  const rev = await verified(policies, files);
  const ref = candidateRefOf(files.manifest);
  const ins = await q.query<{ created_at: Date }>(
    `INSERT INTO policy_candidates (tenant_id, ref, policy_version, registry_version, manifest, registry, wasm, uploaded_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, ref) DO NOTHING RETURNING created_at`,
    [
      tenantId,
      ref,
      rev.policyVersion,
      rev.registryVersion,
      files.manifest,
      files.registry,
      files.wasm,
      uploadedBy,
    ],
  );
  const inserted = ins.rows[0];
  const row = inserted
    ? { created_at: inserted.created_at, uploaded_by: uploadedBy }
    : (
        await q.query<{ created_at: Date; uploaded_by: string }>(
          'SELECT created_at, uploaded_by FROM policy_candidates WHERE tenant_id = $1 AND ref = $2',
          [tenantId, ref],
        )
      ).rows[0];
  if (!row) throw new AppError('CONFLICT', 'the candidate changed while it was stored; upload it again');
  return {
    created: inserted !== undefined,
    candidate: {
      policy_ref: ref,
      policy_version: rev.policyVersion,
      registry_version: rev.registryVersion,
      uploaded_by: row.uploaded_by,
      created_at: row.created_at.toISOString(),
    },
  };
}

/** Whether the tenant has this candidate. */
export async function candidateExists(q: Queryable, tenantId: string, ref: string): Promise<boolean> {
  return (
    (await q.query('SELECT 1 FROM policy_candidates WHERE tenant_id = $1 AND ref = $2', [tenantId, ref])).rows
      .length > 0
  );
}

/**
 * Loads candidates by ref, verified again on every load from the database (the trusted keys may
 * have changed since upload); a few are kept instantiated.
 */
export class CandidateLoader {
  private readonly kept = new Map<string, PolicyRevision>();
  constructor(
    private readonly db: Db,
    private readonly policies: PolicyStore,
    private readonly keep = 4,
  ) {}

  async load(tenantId: string, ref: string): Promise<PolicyRevision> {
    const key = `${tenantId}\u0000${ref}`;
    const hit = this.kept.get(key);
    if (hit) return hit;
    const { rows } = await this.db.query<Files>(
      'SELECT manifest, registry, wasm FROM policy_candidates WHERE tenant_id = $1 AND ref = $2',
      [tenantId, ref],
    );
    const files = rows[0];
    if (!files) throw new AppError('CANDIDATE_NOT_FOUND', `no candidate ${ref}`);
    const rev = await verified(this.policies, files);
    this.kept.set(key, rev);
    if (this.kept.size > this.keep) this.kept.delete(this.kept.keys().next().value as string);
    return rev;
  }
}
