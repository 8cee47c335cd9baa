/**
 * Money movement as a property of the route (issue 13 item 5): the pipeline runs every handler
 * inside a scope naming the route's declaration (RouteSpec.movesMoney) and the API key that
 * called, if any; the places where commands enter the ledger (core/ledger/service.ts,
 * core/agents/ledger.ts, core/payments/transfers.ts) ask it before moving money. A route that
 * reaches a posting, hold, capture or reversal without declaring how an API key's budget counts
 * it is a programming error and moves nothing.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { parseBudgetCount, type BudgetCount, type MoneyMovement } from '../../shared/api-key-budget.ts';
import { AppError } from '../../shared/errors.ts';
import type { EdgeIdentity } from './route.ts';

export interface MoneyScope {
  /** The route template, for the error that names an undeclared route. */
  template: string;
  movement: MoneyMovement | undefined;
  /** The API key the edge verified for this request (x-credential api-key). */
  apiKeyId: string | undefined;
  /** What the edge counted against that key's amount budget. */
  edgeCount: BudgetCount | undefined;
}

const scopes = new AsyncLocalStorage<MoneyScope>();

/** The scope of a request: the route's declaration and the edge's identity (trusted only from the edge). */
export function moneyScopeOf(
  template: string,
  movement: MoneyMovement | undefined,
  identity: EdgeIdentity,
): MoneyScope {
  const viaKey = identity.fromEdge && identity.credential === 'api-key' ? identity.principalId : undefined;
  return {
    template,
    movement,
    apiKeyId: viaKey,
    edgeCount: viaKey ? parseBudgetCount(identity.budgetCounted) : undefined,
  };
}

/** Run a route handler inside its money scope. */
export function inMoneyScope<T>(scope: MoneyScope, fn: () => T): T {
  return scopes.run(scope, fn);
}

/** Ledger command operations that move (or, for a hold, reserve) money. */
const moving = new Set(['post', 'reverse', 'hold', 'capture']);

/**
 * Asked before ledger commands run: throws when the current route moves money without having
 * declared it, or when an API key reaches money no key may move. Returns the scope (undefined
 * outside a request: the hold sweeper and other background work).
 */
export function checkMoneyMovement(ops: readonly unknown[]): MoneyScope | undefined {
  const scope = scopes.getStore();
  if (!scope || !ops.some((op) => typeof op === 'string' && moving.has(op))) return scope;
  if (scope.movement === undefined) {
    throw new Error(
      `route ${scope.template} moves money but does not declare movesMoney (shared/api-key-budget.ts)`,
    );
  }
  if (scope.movement === 'no-api-keys' && scope.apiKeyId !== undefined) {
    throw new AppError('FORBIDDEN', 'API keys cannot move money on this route');
  }
  return scope;
}
