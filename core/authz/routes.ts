/**
 * Decision and simulation endpoints (SPEC 4.4, 9.7): evaluate an input document against the
 * current policy or a kept revision named by `policy_ref`, and return allow/deny with the
 * explanation trace. No side effects: nothing is audited or changed by a simulation (the call
 * itself is audited by the edge like any other). Restricted to staff with the ops or admin role.
 */
import { Type } from '@sinclair/typebox';
import { PolicyDecision } from '../../policy/runtime/bundle.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';

const simulateRoles = ['ops', 'admin'];

const Body = Type.Object({ input: Type.Record(Type.String(), Type.Unknown()) }, { additionalProperties: false });
const Query = Type.Object({ policy_ref: Type.Optional(Type.String({ maxLength: 64 })) });
const GetQuery = Type.Object({
  policy_ref: Type.Optional(Type.String({ maxLength: 64 })),
  input: Type.String({ minLength: 2, maxLength: 8192, description: 'the input document as JSON' }),
});
/** The answer is the decision document itself, trace included (policy/runtime/bundle.ts). */
const Result = PolicyDecision;

function requireOps(ctx: RequestContext<unknown, unknown, unknown>): void {
  if (!ctx.identity.roles.some((r) => simulateRoles.includes(r))) throw new AppError('FORBIDDEN', 'simulation needs the ops or admin role');
}

async function evaluate(policies: PolicyStore | undefined, ref: string | undefined, input: unknown) {
  if (!policies?.current) throw new AppError('POLICY_UNAVAILABLE', 'no policy bundle is loaded');
  const rev = await policies.resolve(ref);
  if (!rev) throw new AppError('POLICY_REF_NOT_FOUND', `policy_ref ${ref ?? ''} is neither kept (${policies.versions().join(', ')}) nor in the bundle source's revisions`);
  try {
    return rev.evaluate(input);
  } catch {
    throw new AppError('VALIDATION_FAILED', 'the input document does not produce a decision');
  }
}

export function authzRoutes(deps: { policies: PolicyStore | undefined }): RouteSpec[] {
  const tags = ['authz'];
  const responses = { 200: { description: 'Decision with its explanation trace', schema: Result } };
  const post = (path: string, operationId: string, summary: string) =>
    defineRoute({
      method: 'POST', path, operationId, summary, tags, query: Query, body: Body, responses,
      handler: async (ctx) => {
        requireOps(ctx);
        return { status: 200, body: await evaluate(deps.policies, ctx.query.policy_ref, ctx.body.input) };
      },
    });
  return [
    post('/authz/decision', 'authzDecision', 'Internal decision call (current policy)'),
    post('/authz/simulate', 'authzSimulate', 'Dry run with explanation trace'),
    post('/v1/auth/simulate', 'authSimulatePost', 'Simulate a decision against a named policy version'),
    defineRoute({
      method: 'GET', path: '/v1/auth/simulate', operationId: 'authSimulateGet', summary: 'Simulate a decision (input as a JSON query parameter)', tags,
      query: GetQuery, responses,
      handler: async (ctx) => {
        requireOps(ctx);
        let input: unknown;
        try {
          input = JSON.parse(ctx.query.input);
        } catch {
          throw new AppError('VALIDATION_FAILED', 'query/input is not JSON');
        }
        if (!input || typeof input !== 'object' || Array.isArray(input)) throw new AppError('VALIDATION_FAILED', 'query/input must be a JSON object');
        const doc = (input as Record<string, unknown>).input ?? input;
        return { status: 200, body: await evaluate(deps.policies, ctx.query.policy_ref, doc) };
      },
    }),
  ];
}
