-- Issue 22: a tenant stores a bounded number of candidates and deletes one to free a slot
-- (DELETE /v1/policy/candidates/{ref}). A finished impact job keeps its result after its
-- candidate is gone (what the author saw before shipping stays readable), so the job no longer
-- references the candidate row; deleting a candidate with a job queued or running is refused by
-- core under the tenant's policy lock (core/policy/candidates.ts), and a runner that finds the
-- candidate gone fails the job saying so.
ALTER TABLE policy_impact_jobs DROP CONSTRAINT policy_impact_jobs_tenant_id_candidate_ref_fkey;
