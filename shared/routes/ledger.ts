/**
 * The core banking ledger (SPEC 4.1, 5.1; issue 5): OAuth core clients, scope checked at the
 * edge and in core. Money by amount is counted at the edge (`request`), by id in the ledger.
 */
import type { MoneyMovement } from '../api-key-budget.ts';
import type { RouteDeclaration } from './types.ts';

const core = (
  method: string,
  template: string,
  resource: string,
  action: string,
  money?: MoneyMovement,
): RouteDeclaration => ({
  method,
  template,
  purpose: 'core.banking',
  resource,
  action,
  credential: 'core-client',
  ...(money ? { money } : {}),
});

export const ledgerRoutes: RouteDeclaration[] = [
  core('POST', '/v1/core/accounts', 'account', 'account.create'),
  core('GET', '/v1/core/accounts/{id}', 'account', 'account.read'),
  core('GET', '/v1/core/accounts/{id}/balances', 'account', 'balance.read'),
  core('POST', '/v1/core/accounts/{id}/close', 'account', 'account.close'),
  core('POST', '/v1/core/postings', 'posting', 'posting.create', 'request'),
  core('GET', '/v1/core/postings/{id}', 'posting', 'posting.read'),
  core('POST', '/v1/core/postings/{id}/reverse', 'posting', 'posting.reverse', 'ledger'),
  core('POST', '/v1/core/holds', 'hold', 'hold.create', 'request'),
  core('GET', '/v1/core/holds/{id}', 'hold', 'hold.read'),
  core('POST', '/v1/core/holds/{id}/capture', 'hold', 'hold.capture', 'ledger'),
  core('POST', '/v1/core/holds/{id}/void', 'hold', 'hold.void'),
  core('POST', '/v1/core/limits/check', 'limit', 'limit.check'),
  core('POST', '/v1/core/statements', 'statement', 'statement.generate'),
  core('POST', '/v1/core/savings-products', 'savings_product', 'savings_product.create'),
  core('GET', '/v1/core/savings-products', 'savings_product', 'savings_product.read'),
  core('POST', '/v1/core/overdraft-lines', 'overdraft_line', 'overdraft_line.create'),
  core('GET', '/v1/core/overdraft-lines/{id}', 'overdraft_line', 'overdraft_line.read'),
  core('POST', '/v1/core/overdraft-lines/{id}/close', 'overdraft_line', 'overdraft_line.close'),
];
