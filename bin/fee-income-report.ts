/**
 * The reconciliation report of migration 0955 (issue 21 item 2): each fee-income move, with the
 * two accounts' balances before and after it (summing to the same totals) and now, as JSON.
 *   npx tsx bin/fee-income-report.ts [tenantId]
 * Reads DATABASE_URL (the database of `npm start` or a deployment). Exits 1 when a move is not
 * balanced or not yet audited (a core appends the audit records when it starts).
 */
import { loadLedgerCurrencies } from '../core/admin/reference/currencies.ts';
import { feeIncomeReconciliation } from '../core/ledger/fee-income.ts';
import { createDb } from '../shared/db/pool.ts';
import { createLogger } from '../shared/log.ts';
import { createMetrics } from '../shared/metrics.ts';
import { loadConfig } from './config.ts';

async function main(): Promise<number> {
  const [tenantId] = process.argv.slice(2);
  const config = loadConfig();
  if (!config.databaseUrl) throw new Error('set DATABASE_URL to the database to reconcile');
  const db = createDb({
    connectionString: config.databaseUrl,
    metrics: createMetrics(),
    log: createLogger('silent'),
  });
  try {
    await loadLedgerCurrencies(db);
    const moves = await feeIncomeReconciliation(db, tenantId);
    process.stdout.write(`${JSON.stringify({ moves }, null, 2)}\n`);
    return moves.every((m) => m.balanced && m.audited) ? 0 : 1;
  } finally {
    await db.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`error: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
