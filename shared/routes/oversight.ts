/**
 * Issue 20 item 4: the staff purposes of the signed registry reachable through the gateway
 * (core/oversight/). The purpose is fixed per route, so a support agent's lookup is always
 * masked and a fraud officer's always at AAL 2; each purpose's roles are its `required_roles`.
 * Consents are the customer's own (operational, customer token).
 */
import { customerRoute as customer, operationalPurpose, type RouteDeclaration } from './types.ts';

const staff = (
  method: string,
  template: string,
  purpose: string,
  resource: string,
  action: string,
  roles: readonly string[],
): RouteDeclaration => ({ method, template, purpose, resource, action, credential: 'staff', roles });

const support = ['support'] as const;
const fraud = ['fraud'] as const;

export const oversightRoutes: RouteDeclaration[] = [
  staff('GET', '/v1/support/customers', 'support.investigate', 'customer', 'customer.read', support),
  staff('GET', '/v1/fraud/customers', 'fraud.review', 'customer', 'customer.read', fraud),
  staff('GET', '/v1/fraud/holds', 'fraud.review', 'fraud_hold', 'fraud_hold.read', fraud),
  staff('POST', '/v1/fraud/holds', 'fraud.review', 'fraud_hold', 'fraud_hold.place', fraud),
  staff('POST', '/v1/fraud/holds/{id}:lift', 'fraud.review', 'fraud_hold', 'fraud_hold.lift', fraud),
  staff('GET', '/v1/compliance/customers/{customerId}/kyc', 'compliance.kyc', 'kyc_customer', 'kyc.review', [
    'compliance',
  ]),
  staff('GET', '/v1/analytics/aggregates', 'analytics.aggregate', 'aggregate', 'aggregate.read', ['analyst']),
  customer('GET', '/v1/marketing/offers', 'marketing.personalize', 'offer', 'offer.read'),
  customer('GET', '/v1/consents', operationalPurpose, 'consent', 'consent.list'),
  customer('PUT', '/v1/consents/{purpose}', operationalPurpose, 'consent', 'consent.grant'),
  customer('DELETE', '/v1/consents/{purpose}', operationalPurpose, 'consent', 'consent.withdraw'),
];
