/**
 * Candidate policy bundles (issue 22 item 2): uploaded by a policy author, verified against the
 * trusted signers exactly like a bundle the edges load (manifest signature, WASM and registry
 * hashes, registry signature), and stored whole in PostgreSQL so any core can replay against
 * it. A candidate is named by its `policy_ref` (`cand-` and the manifest's SHA-256 prefix): the
 * same signed bundle uploaded twice is the same candidate.
 */
import { createHash } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import type { Logger } from 'pino';
import {
  type BundleFiles,
  type CheckedBundle,
  manifestMaxBytes,
  registryMaxBytes,
} from '../../policy/runtime/bundle.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { policyToolingError } from './faults.ts';
import { loadCandidate } from './candidate-loader.ts';

/** The bundle's three files as uploaded: the two JSON documents as their exact text (their hashes are over bytes), the WASM as base64. */
export const CandidateBody = Type.Object(
  {
    manifest: Type.String({
      minLength: 2,
      maxLength: manifestMaxBytes,
      description: 'manifest.json, its exact text',
    }),
    registry: Type.String({
      minLength: 2,
      maxLength: registryMaxBytes,
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
/**
 * The body is one object of three strings: anything nested in it, or some thousands of members
 * (5 MB of them built 60 MB of heap), is refused 400 before it is parsed (core/http/body.ts), as
 * the schema refuses it after. Up to 64 members are parsed, as before: a repeated member is read
 * as its last copy, and such a body is still answered by the schema or the verifier.
 */
export const candidateBodyStructure = { maxDepth: 1, maxCommas: 63 } as const;

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

/**
 * The candidate checked (signatures, hashes, shapes: on this thread, running nothing of it) and
 * its WASM loaded off core's event loop: 422 for a fault of the bundle, never for one of ours (faults.ts).
 */
export async function verifyCandidate(
  verifier: { policies: PolicyStore; log: Logger },
  files: BundleFiles,
  tenantId: string,
): Promise<CheckedBundle> {
  try {
    const checked = await verifier.policies.verify(files);
    await loadCandidate(verifier.policies, files, tenantId);
    return checked;
  } catch (err) {
    // The verifier's messages name which check failed (signature, hash, shape); they carry no secret.
    throw policyToolingError(err, verifier.log, 'verifying a candidate');
  }
}

/** A candidate's files as uploaded. */
export const candidateFilesOf = (body: CandidateBody): BundleFiles => ({
  manifest: Buffer.from(body.manifest, 'utf8'),
  registry: Buffer.from(body.registry, 'utf8'),
  wasm: Buffer.from(body.wasm, 'base64'),
});

/**
 * Verify (verifyCandidate) and store a candidate for `tenantId` (caller's transaction), within the
 * tenant's cap; returns it as stored. A caller with a request to answer verifies first, outside
 * its transaction (storeVerified): loading takes up to candidateLoadMs, a connection held meanwhile.
 */
export async function storeCandidate(
  q: Queryable,
  verifier: { policies: PolicyStore; log: Logger },
  tenantId: string,
  uploadedBy: string,
  body: CandidateBody,
): Promise<{ candidate: Candidate; created: boolean }> {
  const files = candidateFilesOf(body);
  return storeVerified(q, tenantId, uploadedBy, files, await verifyCandidate(verifier, files, tenantId));
}

/** Store `files`, which verifyCandidate verified as `checked`, for `tenantId` within the tenant's cap. */
export async function storeVerified(
  q: Queryable,
  tenantId: string,
  uploadedBy: string,
  files: BundleFiles,
  checked: CheckedBundle,
): Promise<{ candidate: Candidate; created: boolean }> {
  const rev = { policyVersion: checked.manifest.policy_version, registryVersion: checked.registry.version };
  const ref = candidateRefOf(files.manifest);
  await lockTenantPolicy(q, tenantId);
  await ensureRoom(q, tenantId, ref);
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

/** Candidates one tenant may store (issue 22: each is a whole bundle in PostgreSQL); deleting one frees a slot. */
export const maxCandidatesPerTenant = 20;

/**
 * Serialises a tenant's changes to its candidates, shadow and impact jobs (caller's transaction):
 * a candidate counted, deleted, made shadow or replayed by two requests at once is seen by one.
 */
export async function lockTenantPolicy(q: Queryable, tenantId: string): Promise<void> {
  await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`policy-impact:${tenantId}`]);
}

/** Refuse a new candidate past the tenant's cap (caller holds lockTenantPolicy). */
async function ensureRoom(q: Queryable, tenantId: string, ref: string): Promise<void> {
  const { rows } = await q.query<{ n: string; present: boolean }>(
    'SELECT count(*) AS n, bool_or(ref = $2) AS present FROM policy_candidates WHERE tenant_id = $1',
    [tenantId, ref],
  );
  const row = rows[0];
  if (!row?.present && Number(row?.n) >= maxCandidatesPerTenant)
    throw new AppError(
      'CANDIDATE_LIMIT',
      `this tenant stores ${maxCandidatesPerTenant} candidates; delete one (DELETE /v1/policy/candidates/{ref}) to upload another`,
    );
}

interface CandidateRow {
  ref: string;
  policy_version: string;
  registry_version: string;
  uploaded_by: string;
  created_at: Date;
}
const candidateOf = (r: CandidateRow): Candidate => ({
  policy_ref: r.ref,
  policy_version: r.policy_version,
  registry_version: r.registry_version,
  uploaded_by: r.uploaded_by,
  created_at: r.created_at.toISOString(),
});

/** The tenant's candidates, newest first (at most maxCandidatesPerTenant). */
export async function listCandidates(q: Queryable, tenantId: string): Promise<Candidate[]> {
  const { rows } = await q.query<CandidateRow>(
    `SELECT ref, policy_version, registry_version, uploaded_by, created_at FROM policy_candidates
     WHERE tenant_id = $1 ORDER BY created_at DESC, ref`,
    [tenantId],
  );
  return rows.map(candidateOf);
}

/**
 * Delete a candidate (caller's transaction, holding lockTenantPolicy). Refused while it is the
 * tenant's shadow (the edges evaluate it) or an impact job of it is queued or running; finished
 * jobs keep their results (migration 0950 lets them outlive their candidate).
 */
export async function deleteCandidate(q: Queryable, tenantId: string, ref: string): Promise<Candidate> {
  const use = await q.query<{ shadow: boolean; open_jobs: string }>(
    `SELECT EXISTS (SELECT 1 FROM policy_shadows WHERE tenant_id = $1 AND candidate_ref = $2) AS shadow,
            (SELECT count(*) FROM policy_impact_jobs WHERE tenant_id = $1 AND candidate_ref = $2 AND status IN ('queued', 'running')) AS open_jobs`,
    [tenantId, ref],
  );
  const u = use.rows[0];
  if (u?.shadow)
    throw new AppError('CANDIDATE_IN_USE', `${ref} is the shadow of this tenant; clear the shadow first`);
  if (Number(u?.open_jobs) > 0)
    throw new AppError(
      'CANDIDATE_IN_USE',
      `${ref} has impact jobs queued or running; wait for them to finish`,
    );
  const { rows } = await q.query<CandidateRow>(
    `DELETE FROM policy_candidates WHERE tenant_id = $1 AND ref = $2
     RETURNING ref, policy_version, registry_version, uploaded_by, created_at`,
    [tenantId, ref],
  );
  const row = rows[0];
  if (!row) throw new AppError('CANDIDATE_NOT_FOUND', `no candidate ${ref}`);
  return candidateOf(row);
}
