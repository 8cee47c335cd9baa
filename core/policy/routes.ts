/**
 * Policy impact endpoints (issue 22 item 2; SPEC 4.4 beside simulate): upload a signed candidate
 * bundle, start a replay of the tenant's recorded decisions against it (202 and a job to poll),
 * read the job. Roles policy_author, ops or admin (the registry says the same at the edge);
 * uploads and replays are audited naming who asked. A tenant sees only its own candidates,
 * jobs and recorded decisions.
 */
import { Type } from '@sinclair/typebox';
import type { Logger } from 'pino';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import { appendAudit } from '../../shared/audit.ts';
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import {
  Candidate,
  CandidateBody,
  candidateBodyLimitBytes,
  candidateBodyStructure,
  candidateExists,
  deleteCandidate,
  listCandidates,
  lockTenantPolicy,
  maxCandidatesPerTenant,
  candidateFilesOf,
  storeVerified,
  verifyCandidate,
} from './candidates.ts';
import { ImpactJob, impactJob, impactMaxWindowMs, queueImpactJob } from './impact.ts';
import { ImpactRunner } from './impact-runner.ts';
import { clearShadow, setShadow, Shadow, shadowView, ShadowView } from './shadow.ts';
import { declared } from '../http/declared.ts';

interface Caller {
  tenantId: string;
  principalId: string;
  aal: number;
  sessionId: string | undefined;
  ip: string;
}

function callerOf(ctx: RequestContext<unknown, unknown, unknown>): Caller {
  const id = ctx.identity;
  if (!id.tenantId || !id.principalId) throw new AppError('UNAUTHORIZED', 'a staff credential is required');
  // The roles of the route's declaration (shared/routes/policy.ts), checked again here.
  if (!id.roles.some((r) => ctx.routeRoles.includes(r)))
    throw new AppError('FORBIDDEN', `policy impact needs one of the roles ${ctx.routeRoles.join(', ')}`);
  return {
    tenantId: id.tenantId,
    principalId: id.principalId,
    aal: id.aal ?? 1,
    sessionId: id.sessionId,
    ip: id.clientIp ?? '',
  };
}

/** Issue 14 item 6: a staff action's record names the person, their AAL and session. */
const auditOf = (
  c: Caller,
  action: string,
  target: { type: string; id: string },
  attrs: Record<string, unknown>,
) => ({
  tenantId: c.tenantId,
  actor: { type: 'staff', id: c.principalId },
  action,
  target,
  attrs: { ...attrs, aal: c.aal, ip: c.ip, ...(c.sessionId ? { sessionId: c.sessionId } : {}) },
});

const CandidateList = Type.Object({ candidates: Type.Array(Candidate) });

const ImpactBody = Type.Object(
  {
    policy_ref: Type.String({
      pattern: '^cand-[0-9a-f]{16}$',
      description: 'a candidate uploaded with POST /v1/policy/candidates',
    }),
    since: Type.String({
      format: 'date-time',
      description: 'start of the window of recorded decisions (inclusive)',
    }),
    until: Type.Optional(
      Type.String({ format: 'date-time', description: 'end of the window (exclusive); default now' }),
    ),
  },
  { additionalProperties: false },
);

export interface PolicyImpactDeps {
  db: Db;
  /** The core's policy store: its trusted signers verify candidates; its revisions are the baselines. */
  policies: PolicyStore | undefined;
  log: Logger;
  now: () => number;
  /** How long a page of replayed decisions may take before its job fails (impactPageDeadlineMs; tests). */
  pageDeadlineMs?: number;
}

export function policyImpactRoutes(deps: PolicyImpactDeps): {
  routes: RouteSpec[];
  runner: ImpactRunner | undefined;
} {
  // A core without a policy store (tools, tests) serves the routes but verifies nothing and runs no jobs.
  const policies = deps.policies;
  const runner = policies
    ? new ImpactRunner({
        db: deps.db,
        log: deps.log,
        policies,
        ...(deps.pageDeadlineMs === undefined ? {} : { pageDeadlineMs: deps.pageDeadlineMs }),
      })
    : undefined;
  return { routes: impactRouteList(deps, runner), runner };
}

/** The store that verifies uploaded candidates; a core without one refuses uploads. */
function verifier(deps: PolicyImpactDeps): PolicyStore {
  if (!deps.policies)
    throw new AppError('POLICY_UNAVAILABLE', 'this core has no policy store to verify candidates with');
  return deps.policies;
}

const tags = ['policy'];

const policyCandidateUploadRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('POST', '/v1/policy/candidates'),
    operationId: 'policyCandidateUpload',
    tags,
    body: CandidateBody,
    bodyLimitBytes: candidateBodyLimitBytes,
    bodyStructure: candidateBodyStructure,
    summary: `Upload a signed candidate bundle (manifest and registry as their exact text, policy.wasm as base64); verified against the trusted signers like any bundle. A tenant stores at most ${maxCandidatesPerTenant} (409 CANDIDATE_LIMIT; delete one to free a slot). The edge does not buffer this body.`,
    responses: {
      201: { description: 'Stored', schema: Candidate },
      200: { description: 'Already stored (the same signed bundle)', schema: Candidate },
    },
    handler: async (ctx) => {
      const c = callerOf(ctx);
      // Verified before the transaction: loading the WASM (off this thread) takes a while.
      const files = candidateFilesOf(ctx.body);
      const checked = await verifyCandidate({ policies: verifier(deps), log: deps.log }, files, c.tenantId);
      const stored = await deps.db.tx(async (q) => {
        const s = await storeVerified(q, c.tenantId, c.principalId, files, checked);
        if (s.created) {
          await appendAudit(q, [
            auditOf(
              c,
              'policy.candidate_upload',
              { type: 'policy_candidate', id: s.candidate.policy_ref },
              {
                policy_version: s.candidate.policy_version,
                registry_version: s.candidate.registry_version,
              },
            ),
          ]);
        }
        return s;
      });
      return { status: stored.created ? 201 : 200, body: stored.candidate };
    },
  });

const policyCandidateListRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/policy/candidates'),
    operationId: 'policyCandidateList',
    tags,
    summary: `The tenant's stored candidates, newest first (at most ${maxCandidatesPerTenant}; delete one to upload past that)`,
    responses: { 200: { description: 'Candidates', schema: CandidateList } },
    handler: async (ctx) => ({
      status: 200,
      body: { candidates: await listCandidates(deps.db, callerOf(ctx).tenantId) },
    }),
  });

const policyCandidateDeleteRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('DELETE', '/v1/policy/candidates/{ref}'),
    operationId: 'policyCandidateDelete',
    tags,
    params: Type.Object({ ref: ImpactBody.properties.policy_ref }),
    summary:
      "Delete a candidate, freeing a slot; refused (409 CANDIDATE_IN_USE) while it is the tenant's shadow or has an impact job queued or running. Finished jobs keep their results.",
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx) => {
      const c = callerOf(ctx);
      await deps.db.tx(async (q) => {
        await lockTenantPolicy(q, c.tenantId);
        const gone = await deleteCandidate(q, c.tenantId, ctx.params.ref);
        await appendAudit(q, [
          auditOf(
            c,
            'policy.candidate_delete',
            { type: 'policy_candidate', id: gone.policy_ref },
            { policy_version: gone.policy_version, registry_version: gone.registry_version },
          ),
        ]);
      });
      return { status: 204 };
    },
  });

const policyImpactStartRoute = (deps: PolicyImpactDeps, runner: ImpactRunner | undefined): RouteSpec =>
  defineRoute({
    ...declared('POST', '/v1/policy/impact'),
    operationId: 'policyImpactStart',
    tags,
    body: ImpactBody,
    summary:
      "Replay the tenant's recorded decisions of a window against a candidate: 202 and a job; poll GET /v1/policy/impact/{id}",
    responses: { 202: { description: 'Queued', schema: ImpactJob } },
    handler: async (ctx) => {
      const c = callerOf(ctx);
      const since = new Date(ctx.body.since);
      const until = ctx.body.until ? new Date(ctx.body.until) : new Date(deps.now());
      if (!(since < until)) throw new AppError('VALIDATION_FAILED', 'since must be before until');
      if (until.getTime() - since.getTime() > impactMaxWindowMs)
        throw new AppError('VALIDATION_FAILED', 'a window covers at most 31 days');
      const job = await deps.db.tx(async (q) => {
        // Under the tenant's policy lock: the candidate cannot be deleted between this check and the job.
        await lockTenantPolicy(q, c.tenantId);
        if (!(await candidateExists(q, c.tenantId, ctx.body.policy_ref)))
          throw new AppError('CANDIDATE_NOT_FOUND', `no candidate ${ctx.body.policy_ref}`);
        const j = await queueImpactJob(q, {
          tenantId: c.tenantId,
          ref: ctx.body.policy_ref,
          since,
          until,
          requestedBy: c.principalId,
        });
        await appendAudit(q, [
          auditOf(
            c,
            'policy.impact_run',
            { type: 'policy_impact_job', id: j.id },
            { policy_ref: j.policy_ref, since: j.since, until: j.until },
          ),
        ]);
        return j;
      });
      runner?.poke();
      return { status: 202, body: job, headers: { location: `/v1/policy/impact/${job.id}` } };
    },
  });

const policyImpactGetRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/policy/impact/{id}'),
    operationId: 'policyImpactGet',
    tags,
    params: Type.Object({ id: Type.String({ format: 'uuid' }) }),
    summary: 'An impact job: status, counts so far, groups and samples (complete once status is done)',
    responses: { 200: { description: 'The job', schema: ImpactJob } },
    handler: async (ctx) => {
      const c = callerOf(ctx);
      return { status: 200, body: await impactJob(deps.db, c.tenantId, ctx.params.id) };
    },
  });

const policyShadowSetRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('PUT', '/v1/policy/shadow'),
    operationId: 'policyShadowSet',
    tags,
    body: Type.Object({ policy_ref: ImpactBody.properties.policy_ref }, { additionalProperties: false }),
    summary:
      "Load a candidate as the tenant's shadow: the edges evaluate the tenant's live decisions against it after each answer, never changing one, and count and sample divergences",
    responses: {
      200: { description: 'The shadow in force (edges pick it up within 2 s)', schema: Shadow },
    },
    handler: async (ctx) => {
      const c = callerOf(ctx);
      const shadow = await deps.db.tx(async (q) => {
        await lockTenantPolicy(q, c.tenantId);
        if (!(await candidateExists(q, c.tenantId, ctx.body.policy_ref)))
          throw new AppError('CANDIDATE_NOT_FOUND', `no candidate ${ctx.body.policy_ref}`);
        const s = await setShadow(q, c.tenantId, ctx.body.policy_ref, c.principalId);
        await appendAudit(q, [
          auditOf(c, 'policy.shadow_set', { type: 'policy_shadow', id: s.policy_ref }, {}),
        ]);
        return s;
      });
      return { status: 200, body: shadow };
    },
  });

const policyShadowGetRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/policy/shadow'),
    operationId: 'policyShadowGet',
    tags,
    summary:
      "The tenant's shadow candidate and its latest sampled divergences (edge metric edge_policy_shadow counts them all)",
    responses: { 200: { description: 'Shadow and divergences', schema: ShadowView } },
    handler: async (ctx) => ({ status: 200, body: await shadowView(deps.db, callerOf(ctx).tenantId) }),
  });

const policyShadowClearRoute = (deps: PolicyImpactDeps): RouteSpec =>
  defineRoute({
    ...declared('DELETE', '/v1/policy/shadow'),
    operationId: 'policyShadowClear',
    tags,
    summary: 'Stop shadow evaluation for the tenant',
    responses: { 204: { description: 'No shadow now' } },
    handler: async (ctx) => {
      const c = callerOf(ctx);
      await deps.db.tx(async (q) => {
        if (await clearShadow(q, c.tenantId))
          await appendAudit(q, [
            auditOf(c, 'policy.shadow_clear', { type: 'policy_shadow', id: c.tenantId }, {}),
          ]);
      });
      return { status: 204 };
    },
  });

function impactRouteList(deps: PolicyImpactDeps, runner: ImpactRunner | undefined): RouteSpec[] {
  return [
    policyCandidateUploadRoute(deps),
    policyCandidateListRoute(deps),
    policyCandidateDeleteRoute(deps),
    policyImpactStartRoute(deps, runner),
    policyImpactGetRoute(deps),
    policyShadowSetRoute(deps),
    policyShadowGetRoute(deps),
    policyShadowClearRoute(deps),
  ];
}
