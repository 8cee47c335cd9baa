/** Customer money, history and payees (SPEC 4.3; issue 7): purposes fixed here, never taken from the client. */
import { customerRoute as customer, type RouteDeclaration } from './types.ts';

export const paymentRoutes: RouteDeclaration[] = [
  {
    ...customer('POST', '/v1/transfers', 'customer.transact', 'transaction', 'transfer.create'),
    money: 'request',
  },
  {
    ...customer('POST', '/v1/transfers/confirm', 'customer.transact', 'transaction', 'transfer.confirm'),
    money: 'no-api-keys',
  },
  customer('GET', '/v1/transactions', 'customer.account.view', 'transaction', 'transaction.read'),
  customer('GET', '/v1/accounts', 'customer.account.view', 'account', 'account.read'),
  customer('POST', '/v1/beneficiaries', 'customer.beneficiary.manage', 'beneficiary', 'beneficiary.create'),
  customer('GET', '/v1/beneficiaries', 'customer.beneficiary.manage', 'beneficiary', 'beneficiary.list'),
  customer(
    'DELETE',
    '/v1/beneficiaries/{id}',
    'customer.beneficiary.manage',
    'beneficiary',
    'beneficiary.delete',
  ),
];
