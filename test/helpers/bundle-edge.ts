/**
 * The edge's decider as production builds it (cached state, the built and signed policy bundle,
 * the decision audit written inline) over a test database, behind a loopback ext_authz server with
 * a generous decision budget: suites that assert outcomes, not timing.
 */
import type { Logger } from 'pino';
import type { KeyStore } from '../../core/keys/keys.ts';
import { AuditWriter } from '../../edge/audit-writer.ts';
import { RiskEngine } from '../../edge/auth/risk.ts';
import { createDecider } from '../../edge/authz.ts';
import { EdgeState } from '../../edge/state/store.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import type { Db } from '../../shared/db/pool.ts';
import { TokenVerifier } from '../../shared/token-keys.ts';
import { startTestEdge, type TestEdge } from './edge.ts';

export interface BundleEdge {
  state: EdgeState;
  audit: AuditWriter;
  edge: TestEdge;
  stop(): Promise<void>;
}

/** `verifier`: the token verifier the edge's state uses (default: one over `db`). */
export async function startBundleEdge(
  db: Db,
  keys: KeyStore,
  opts: { log: Logger; edgeSecret: string; verifier?: TokenVerifier },
): Promise<BundleEdge> {
  const { log } = opts;
  const state = new EdgeState(db, opts.verifier ?? new TokenVerifier(db), keys.apiKeySecrets, log);
  await state.start();
  const policies = new PolicyStore(await loadTrustedKeys());
  await policies.load(defaultBundleDir);
  const audit = new AuditWriter(db, log);
  const decide = createDecider({
    state,
    challenges: keys.challenges,
    policies,
    audit,
    risk: new RiskEngine(),
    log,
    edgeSecret: opts.edgeSecret,
  });
  const edge = await startTestEdge({ log, decide, budgetMs: 2000 });
  return {
    state,
    audit,
    edge,
    async stop() {
      await edge.close();
      await audit.stop();
      await state.stop();
    },
  };
}
