/**
 * Issue 15 item 9: no refusals after "up". A cold edge spends its first Checks connecting to
 * PostgreSQL, loading tenants and keys, compiling the decision path and tiering up the policy's
 * WASM; on a loaded machine that passes the 100 ms budget (SPEC 8) and the gateway answers 503
 * `authz_unavailable`. warmEdge() does that work before the edge listens.
 *
 * The rehearsal runs synthetic Checks through the real decision code with the real state and
 * policy, but with an audit writer that keeps nothing, a risk engine of its own and no rate
 * limiter: they are not requests anyone made, so they are neither audited nor counted.
 */
import type { Logger } from 'pino';
import { databaseUnreachable, warmPool, type Db } from '../shared/db/pool.ts';
import { type StartupSteps, startupPool } from '../shared/startup.ts';
import { AuditWriter } from './audit-writer.ts';
import { RiskEngine } from './auth/risk.ts';
import { createDecider } from './authz.ts';
import type { ChallengeKeys } from '../shared/challenge.ts';
import type { PolicyStore } from '../policy/runtime/store.ts';
import type { ResolveRoute } from './routes.ts';
import { check } from './server.ts';
import type { EdgeState } from './state/store.ts';
import type { CheckRequest } from './types.ts';

/** Rounds of the rehearsal: enough for V8 and the WASM tiers to optimise the hot path. */
export const rehearsalRounds = 100;
/** The rehearsal is not judged by the decision budget; it only has to finish. */
const rehearsalBudgetMs = 5_000;

/** Requests that walk the common paths: a public route, a missing credential, an unknown bearer token. */
const rehearsalRequests: { method: string; path: string; headers: Record<string, string> }[] = [
  { method: 'GET', path: '/v1/health', headers: {} },
  { method: 'GET', path: '/v1/countries', headers: {} },
  { method: 'GET', path: '/v1/countries', headers: { authorization: 'Bearer svc_warm-up-not-a-token' } },
  { method: 'GET', path: '/v1/accounts', headers: { authorization: 'Bearer not.a.jwt' } },
];

function checkRequest(r: (typeof rehearsalRequests)[number], i: number): CheckRequest {
  return {
    attributes: {
      source: { address: { socket_address: { address: '127.0.0.1', port_value: 0 } } },
      request: {
        http: {
          id: `warm-up-${i}`,
          method: r.method,
          path: r.path,
          host: 'warm-up.invalid',
          scheme: 'http',
          protocol: 'HTTP/1.1',
          size: '0',
          headers: {
            ':method': r.method,
            ':path': r.path,
            ':authority': 'warm-up.invalid',
            'user-agent': 'edge-warm-up',
            ...r.headers,
          },
        },
      },
    },
  };
}

/**
 * What warm-up waits for, as readiness and the log name it. Each is retried until it succeeds: a
 * step that failed once (a connect timing out on a loaded machine) made the edge exit.
 */
export const warmSteps = {
  pool: 'database pool',
  audit: 'decision audit thread',
  state: 'tenants, keys and service tokens',
} as const;

export interface WarmDeps {
  /** The edge's route table (the bundle's), which the rehearsal resolves its requests with. */
  resolve: ResolveRoute;
  db: Db;
  state: EdgeState;
  challenges: ChallengeKeys;
  policies: PolicyStore;
  audit: AuditWriter;
  log: Logger;
  edgeSecret: string;
  /** Runs each step until it succeeds, and says what is awaited meanwhile. */
  steps: StartupSteps;
}

/**
 * The steps' sources, each retried until it succeeds, every statement with a deadline: pool
 * connections (warmPool's answer deadline), the audit thread, then tenants, keys and service
 * tokens once the LISTEN client answers, read through a start-up pool of their own
 * (shared/startup.ts startupPool, closed after): on the serving pool, without a query timeout, each
 * attempt a silent database outlasted kept its connections for ever, and an edge whose pool they
 * filled never warmed once the database answered.
 */
async function warmSources(deps: WarmDeps): Promise<void> {
  const { steps } = deps;
  const startDb = startupPool(deps.db);
  try {
    await Promise.all([
      // A database that answers with a refusal (a wrong password, no such database) is not waited
      // for: warm-up fails with its message. The other steps wait out whatever they meet.
      steps.run(warmSteps.pool, () => warmPool(deps.db), databaseUnreachable),
      steps.run(warmSteps.audit, () => deps.audit.warm()),
      // Loaded once the LISTEN client answers (changes from then on reach the cache), and before
      // the rehearsal, whose Checks would otherwise each fail closed.
      steps.run(warmSteps.state, async () => {
        deps.state.assertFresh();
        await deps.state.warm(startDb);
      }),
    ]);
  } finally {
    await startDb.close();
  }
}

/** Pool connections, the audit thread, tenants, keys and service tokens (warmSources), then the rehearsal. */
export async function warmEdge(deps: WarmDeps): Promise<void> {
  await warmSources(deps);
  const discard = new AuditWriter(deps.db, deps.log, Number.MAX_SAFE_INTEGER, 0, {
    write: async () => undefined,
  });
  const decide = createDecider({
    state: deps.state,
    challenges: deps.challenges,
    policies: deps.policies,
    audit: discard,
    risk: new RiskEngine(),
    log: deps.log,
    edgeSecret: deps.edgeSecret,
  });
  const edge = { log: deps.log, decide, resolve: deps.resolve, budgetMs: rehearsalBudgetMs };
  for (let i = 0; i < rehearsalRounds; i++) {
    await Promise.all(
      rehearsalRequests.map((r, j) => check(edge, checkRequest(r, i * rehearsalRequests.length + j))),
    );
  }
  await discard.stop();
}
