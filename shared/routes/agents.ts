/**
 * The agent operations API (SPEC 4.5; issue 9). Agents present their access token (credential
 * 'agent': a live session of subject_type 'agent'; principal kind 'user' with role agent).
 * Money-moving routes are `agent.transact` (AAL 2), reads and non-money writes `agent.operate`,
 * KYC `compliance.kyc`, ops actions `agent.ops`, the USSD aggregator `ussd.gateway` (a service
 * token with role ussd). The roles are each purpose's `required_roles` in the registry.
 */
import { operationalPurpose, opsOrAdmin, type RouteDeclaration } from './types.ts';

/** Agent money (issue 13 item 5): never an API key's to move (shared/api-key-budget.ts). */
const agentMoney = 'no-api-keys';
const agentRoles = ['agent'] as const;
/** compliance.kyc: compliance officers and agents registering customers. */
const kycRoles = ['compliance', 'agent'] as const;

const auth = (
  template: string,
  action: string,
  credential: 'public' | 'agent' = 'public',
): RouteDeclaration => ({
  method: 'POST',
  template,
  purpose: operationalPurpose,
  resource: 'agent_auth',
  action,
  credential,
});
const transact = (
  method: string,
  template: string,
  resource: string,
  action: string,
  money?: typeof agentMoney,
): RouteDeclaration => ({
  method,
  template,
  purpose: 'agent.transact',
  resource,
  action,
  credential: 'agent',
  roles: agentRoles,
  ...(money ? { money } : {}),
});
const operate = (method: string, template: string, resource: string, action: string): RouteDeclaration => ({
  method,
  template,
  purpose: 'agent.operate',
  resource,
  action,
  credential: 'agent',
  roles: agentRoles,
});
const kyc = (method: string, template: string, action: string): RouteDeclaration => ({
  method,
  template,
  purpose: 'compliance.kyc',
  resource: 'kyc_customer',
  action,
  credential: 'agent',
  roles: kycRoles,
});
const ops = (
  method: string,
  template: string,
  resource: string,
  action: string,
  money?: typeof agentMoney,
): RouteDeclaration => ({
  method,
  template,
  purpose: 'agent.ops',
  resource,
  action,
  credential: 'staff',
  roles: opsOrAdmin,
  ...(money ? { money } : {}),
});
const ussd = (template: string, action: string): RouteDeclaration => ({
  method: 'POST',
  template,
  purpose: 'ussd.gateway',
  resource: 'ussd',
  action,
  credential: 'service',
  roles: ['ussd'],
  money: agentMoney,
});

export const agentRoutes: RouteDeclaration[] = [
  auth('/v1/agent/auth/login', 'agent.auth.login'),
  auth('/v1/agent/auth/refresh', 'agent.auth.refresh'),
  auth('/v1/agent/auth/otp/request', 'agent.auth.otp_request'),
  auth('/v1/agent/auth/otp/verify', 'agent.auth.otp_verify'),
  auth('/v1/agent/auth/device-bind', 'agent.auth.device_bind'),
  auth('/v1/agent/auth/logout', 'agent.auth.logout', 'agent'),
  kyc('POST', '/v1/kyc/customers', 'kyc.register'),
  kyc('POST', '/v1/kyc/customers/{customer_id}/upgrade', 'kyc.upgrade'),
  kyc('POST', '/v1/kyc/customers/{customer_id}/rekcy', 'kyc.rekyc'),
  kyc('GET', '/v1/kyc/customers/{customer_id}/status', 'kyc.read'),
  transact('POST', '/v1/txns/cashin', 'agent_txn', 'cashin.create', agentMoney),
  transact('POST', '/v1/txns/cashout', 'agent_txn', 'cashout.create', agentMoney),
  transact('POST', '/v1/txns/p2p/assist', 'agent_txn', 'p2p.assist', agentMoney),
  transact('POST', '/v1/txns/{txn_id}/authorize', 'agent_txn', 'txn.authorize', agentMoney),
  transact('POST', '/v1/txns/{txn_id}/reverse', 'agent_txn', 'txn.reverse', agentMoney),
  operate('GET', '/v1/txns/{txn_id}', 'agent_txn', 'txn.read'),
  ops('POST', '/v1/ops/txns/{txn_id}/reverse', 'agent_txn', 'txn.reverse', agentMoney),
  // agent, outlet, capabilities (issue 9 item 2)
  operate('GET', '/v1/agent/me', 'agent', 'agent.read'),
  operate('PATCH', '/v1/agent/me', 'agent', 'agent.update'),
  operate('GET', '/v1/agent/outlet', 'outlet', 'outlet.read'),
  operate('GET', '/v1/agent/capabilities', 'capabilities', 'capabilities.read'),
  // content and training (issue 9 item 10)
  operate('GET', '/v1/announcements', 'announcement', 'announcement.read'),
  operate('GET', '/v1/training/courses', 'training', 'course.read'),
  operate('POST', '/v1/training/quizzes/{quiz_id}/submit', 'training', 'quiz.submit'),
  // disputes (issue 9 item 8): the attachment upload is decided on headers alone, its body
  // streamed to core unbuffered (Envoy per-route check_settings; core enforces size and type)
  operate('POST', '/v1/disputes', 'dispute', 'dispute.create'),
  operate('GET', '/v1/disputes/{case_id}', 'dispute', 'dispute.read'),
  {
    ...operate('POST', '/v1/disputes/{case_id}/attachments', 'dispute', 'dispute.attach'),
    disableRequestBodyBuffering: true,
  },
  // USSD (issue 9 item 11): the aggregator is a machine client, a service token with role ussd
  ussd('/v1/ussd/session', 'ussd.session'),
  ussd('/v1/ussd/agent/menu', 'ussd.agent_menu'),
  // float, commissions, wallets, reports (issue 9 items 5-7, 9; core/agents/FLOAT.md)
  operate('GET', '/v1/float', 'float', 'float.read'),
  transact('POST', '/v1/float/topup', 'float_instruction', 'float.topup'),
  transact('POST', '/v1/float/redeem', 'float_instruction', 'float.redeem', agentMoney),
  operate('GET', '/v1/float/instructions/{instruction_id}', 'float_instruction', 'float.instruction.read'),
  transact('POST', '/v1/float/instructions/{instruction_id}/cancel', 'float_instruction', 'float.cancel'),
  ops('GET', '/v1/ops/float/instructions', 'float_instruction', 'float.instruction.list'),
  ops('POST', '/v1/ops/float/instructions/{instruction_id}/approve', 'float_instruction', 'float.approve'),
  // settle posts a top-up or captures a redeem's hold (approve and reject move nothing)
  ops(
    'POST',
    '/v1/ops/float/instructions/{instruction_id}/settle',
    'float_instruction',
    'float.settle',
    agentMoney,
  ),
  ops('POST', '/v1/ops/float/instructions/{instruction_id}/reject', 'float_instruction', 'float.reject'),
  operate('GET', '/v1/agents/{agent_id}/commissions', 'commission', 'commission.read'),
  operate('POST', '/v1/agents/{agent_id}/commissions/payouts/preview', 'commission', 'commission.preview'),
  transact(
    'POST',
    '/v1/agents/{agent_id}/commissions/payouts/accept',
    'commission',
    'commission.accept',
    agentMoney,
  ),
  operate('POST', '/v1/wallets/consent', 'wallet', 'wallet.consent'),
  operate('GET', '/v1/wallets/{wallet_id}/balance', 'wallet', 'wallet.read'),
  operate('GET', '/v1/wallets/{wallet_id}/transactions', 'wallet', 'wallet.read'),
  operate('GET', '/v1/reports/eod', 'report', 'report.read'),
  operate('POST', '/v1/reports/eod/close', 'report', 'report.close'),
  operate('GET', '/v1/reports/txns', 'report', 'report.read'),
  operate('GET', '/v1/reports/float', 'report', 'report.read'),
];
