/**
 * Decision and simulation endpoints (SPEC 4.4, 9.7): evaluate an input document against the
 * current policy or a kept revision named by `policy_ref`, and return allow/deny with the
 * explanation trace. No side effects: nothing is audited or changed by a simulation (the call
 * itself is audited by the edge like any other). Restricted to staff with the ops or admin role.
 */
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { PolicyDecision } from '../../policy/runtime/bundle.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';
import type { Logger } from 'pino';
import { AppError } from '../../shared/errors.ts';
import { policyToolingError } from '../policy/faults.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import { declared } from '../http/declared.ts';

/**
 * The authorization input document (SPEC 2.6), as the edge builds it for every decision (issue 15
 * item 3: the docs page shows its shape and an example). Members the policy reads beyond SPEC 2.6
 * (relationship `tuples`, `consents`, `stepup_bound`, `now_ns`, `local_hour`) are allowed.
 */
const open = { additionalProperties: true } as const;
const exampleInput = {
  tenant: { id: 'demo' },
  subject: {
    id: 'c1',
    type: 'customer',
    aal: 1,
    tuples: [{ relation: 'member', object_ns: 'tenant', object_id: 'demo', caveat: {} }],
  },
  resource: { type: 'transaction', tenant_id: 'demo' },
  action: 'transfer.create',
  purpose: 'customer.transact',
  context: { ip: '10.0.0.1', risk: 'low', time: '2026-11-23T10:00:00Z', now_ns: 0 },
};
const Tuple = Type.Object(
  {
    relation: Type.String(),
    object_ns: Type.String(),
    object_id: Type.String(),
    caveat: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  },
  open,
);
const SimulateInput = Type.Object(
  {
    tenant: Type.Object(
      { id: Type.String(), security: Type.Optional(Type.Record(Type.String(), Type.Unknown())) },
      open,
    ),
    subject: Type.Object(
      {
        id: Type.String(),
        type: Type.Union([Type.Literal('customer'), Type.Literal('user'), Type.Literal('service')]),
        roles: Type.Optional(Type.Array(Type.String())),
        scopes: Type.Optional(Type.Array(Type.String())),
        aal: Type.Integer({ minimum: 1 }),
        tuples: Type.Optional(Type.Array(Tuple)),
      },
      open,
    ),
    resource: Type.Object(
      {
        type: Type.String(),
        id: Type.Optional(Type.String()),
        tenant_id: Type.String(),
        attrs: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
      },
      open,
    ),
    action: Type.String({ description: "one of the purpose's actions (policy/data/registry/data.json)" }),
    purpose: Type.String({ description: 'the purpose the edge derives from the route' }),
    context: Type.Object(
      {
        ip: Type.String(),
        ua: Type.Optional(Type.String()),
        risk: Type.Union([Type.Literal('low'), Type.Literal('medium'), Type.Literal('high')]),
        time: Type.Optional(Type.String({ format: 'date-time' })),
        now_ns: Type.Optional(Type.Number()),
      },
      open,
    ),
  },
  {
    ...open,
    description:
      'Authorization input (SPEC 2.6). The example: a demo customer at AAL 1 asking to create a transfer, answered MFA_REQUIRED (min_aal 2).',
    example: exampleInput,
  },
);
const Body = Type.Object({ input: SimulateInput }, { additionalProperties: false });
/** The GET form carries the same document as JSON text: held to the same schema once parsed. */
const checkInput = TypeCompiler.Compile(SimulateInput);
const Query = Type.Object({ policy_ref: Type.Optional(Type.String({ maxLength: 64 })) });
const GetQuery = Type.Object({
  policy_ref: Type.Optional(Type.String({ maxLength: 64 })),
  input: Type.String({
    minLength: 2,
    maxLength: 8192,
    description:
      'the input document (SPEC 2.6; the POST body\'s `input`) as JSON, bare or as `{"input": ...}`',
    example: JSON.stringify(exampleInput),
  }),
});
/** The answer is the decision document itself, trace included (policy/runtime/bundle.ts). */
const Result = PolicyDecision;

/** The roles of the route's declaration (shared/routes/policy.ts: ops, admin), checked again here. */
function requireOps(ctx: RequestContext<unknown, unknown, unknown>): void {
  if (!ctx.identity.roles.some((r) => ctx.routeRoles.includes(r)))
    throw new AppError('FORBIDDEN', 'simulation needs the ops or admin role');
}

interface SimulateDeps {
  policies: PolicyStore | undefined;
  log: Logger;
}

async function evaluate(deps: SimulateDeps, ref: string | undefined, input: unknown) {
  const { policies } = deps;
  if (!policies?.current) throw new AppError('POLICY_UNAVAILABLE', 'no policy bundle is loaded');
  // A bundle source that cannot be read is this service's failure, not an unknown ref (faults.ts).
  const rev = await policies.resolve(ref).catch((err: unknown) => {
    throw policyToolingError(err, deps.log, 'loading the revision of that policy_ref');
  });
  if (!rev)
    throw new AppError(
      'POLICY_REF_NOT_FOUND',
      `policy_ref ${ref ?? ''} is neither kept (${policies.versions().join(', ')}) nor in the bundle source's revisions`,
    );
  try {
    return rev.evaluate(input);
  } catch {
    throw new AppError('VALIDATION_FAILED', 'the input document does not produce a decision');
  }
}

export function authzRoutes(deps: SimulateDeps): RouteSpec[] {
  const tags = ['authz'];
  const responses = { 200: { description: 'Decision with its explanation trace', schema: Result } };
  const post = (path: string, operationId: string, summary: string) =>
    defineRoute({
      ...declared('POST', path),
      operationId,
      summary,
      tags,
      query: Query,
      body: Body,
      responses,
      handler: async (ctx) => {
        requireOps(ctx);
        return { status: 200, body: await evaluate(deps, ctx.query.policy_ref, ctx.body.input) };
      },
    });
  return [
    post('/authz/decision', 'authzDecision', 'Internal decision call (current policy)'),
    post('/authz/simulate', 'authzSimulate', 'Dry run with explanation trace'),
    post('/v1/auth/simulate', 'authSimulatePost', 'Simulate a decision against a named policy version'),
    defineRoute({
      ...declared('GET', '/v1/auth/simulate'),
      operationId: 'authSimulateGet',
      summary: 'Simulate a decision (input as a JSON query parameter)',
      tags,
      query: GetQuery,
      responses,
      handler: async (ctx) => {
        requireOps(ctx);
        let input: unknown;
        try {
          input = JSON.parse(ctx.query.input);
        } catch {
          throw new AppError('VALIDATION_FAILED', 'query/input is not JSON');
        }
        if (!input || typeof input !== 'object' || Array.isArray(input))
          throw new AppError('VALIDATION_FAILED', 'query/input must be a JSON object');
        const doc = (input as Record<string, unknown>).input ?? input;
        if (!checkInput.Check(doc)) {
          const first = checkInput.Errors(doc).First();
          throw new AppError(
            'VALIDATION_FAILED',
            `query/input is not an authorization input document (SPEC 2.6): ${first?.path || '/'} ${first?.message ?? ''}`.trim(),
          );
        }
        return { status: 200, body: await evaluate(deps, ctx.query.policy_ref, doc) };
      },
    }),
  ];
}
