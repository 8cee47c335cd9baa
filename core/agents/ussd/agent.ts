/**
 * The agent USSD menu (POST /v1/ussd/agent/menu; issue 9 item 11), for agents without a
 * smartphone: 1 float balance (PIN), 2 cash-in (customer phone → amount → PIN). The agent is the
 * one whose phone number the gateway reports; its PIN is checked like its app login (same
 * lockout). A USSD session is PIN only (no bound device): the cash-in runs the same code as
 * POST /v1/txns/cashin (limits, day open, ledger, commission, audit) as an AAL 1 caller.
 */
import type { Queryable, TxClient } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { fromDb } from '../../../shared/money.ts';
import { availableOf } from '../capabilities.ts';
import type { AgentCaller, AgentDeps, AnyCtx } from '../context.ts';
import { startTxn } from '../txns.ts';
import { amountTyped, money, once } from './common.ts';
import { verifyUssdPin } from './pin.ts';
import { con, end, invalidChoice, isPin, phoneOf, type UssdRequest } from './protocol.ts';

export const agentRoute = '/v1/ussd/agent/menu';
const mainMenu = con('Agent menu\n1. Float balance\n2. Cash-in');

interface AgentRow {
  id: string;
  code: string;
  status: string;
  currency: string;
  float_account_id: string;
  pin_hash: Buffer;
  pin_salt: Buffer;
  kdf_version: number;
}

async function agentByPhone(q: Queryable, tenantId: string, phone: string): Promise<AgentRow | undefined> {
  const { rows } = await q.query<AgentRow>(
    'SELECT id, code, status, currency, float_account_id, pin_hash, pin_salt, kdf_version FROM agents WHERE tenant_id = $1 AND phone_e164 = $2',
    [tenantId, phone],
  );
  return rows[0];
}

async function cashIn(
  deps: AgentDeps,
  q: TxClient,
  tenantId: string,
  a: AgentRow,
  customerPhone: string,
  amount: string,
  form: UssdRequest,
  requestId: string,
): Promise<string> {
  const secrets = await deps.identity.secrets.get(tenantId);
  if (!secrets) throw new AppError('TENANT_NOT_FOUND', 'unknown tenant');
  const caller: AgentCaller = {
    kind: 'agent',
    tenantId,
    agentId: a.id,
    sessionId: `ussd:${form.sessionId}`,
    aal: 1,
  };
  const r = await startTxn(
    deps,
    q,
    caller,
    'CASHIN',
    { customerPhone, amount, reference: `ussd:${form.sessionId}`.slice(0, 64) },
    requestId,
    secrets,
  );
  return end(
    `Cash-in of ${money(fromDb(r.amount), r.currency)} to ${customerPhone} done. Commission ${money(fromDb(r.commission), r.currency)}. Ref ${r.id.slice(-8)}`,
  );
}

export async function agentMenu(
  deps: AgentDeps,
  ctx: AnyCtx,
  tenantId: string,
  form: UssdRequest,
  answers: string[],
): Promise<string> {
  const phone = phoneOf(form.phoneNumber);
  const a = phone ? await agentByPhone(deps.db, tenantId, phone) : undefined;
  if (!a) return end('This number is not registered as an agent.');
  if (a.status !== 'active') return end('Your agent account is suspended. Contact your supervisor.');
  const [choice, a1, a2, a3, ...rest] = answers;
  const pinOk = (pin: string) =>
    verifyUssdPin(
      deps,
      ctx,
      {
        kind: 'agent',
        tenantId,
        id: a.id,
        handle: a.code,
        stored: { hash: a.pin_hash, salt: a.pin_salt, kdfVersion: a.kdf_version },
      },
      pin,
      form.sessionId,
    );
  if (choice === undefined) return mainMenu;
  if (rest.length > 0) return invalidChoice;
  if (choice === '1') {
    if (a1 === undefined) return con('Enter your PIN');
    if (a2 !== undefined) return invalidChoice;
    if (!isPin(a1)) return end('A PIN is 4 to 6 digits.');
    if (!(await pinOk(a1))) return end('Wrong PIN.');
    return end(
      `Float balance: ${money(await availableOf(deps.db, tenantId, a.float_account_id), a.currency)}`,
    );
  }
  if (choice === '2') {
    if (a1 === undefined) return con('Enter customer phone number');
    const customer = phoneOf(a1);
    if (!customer) return end('Invalid phone number.');
    if (a2 === undefined) return con(`Enter amount (${a.currency})`);
    const amount = amountTyped(a2, a.currency);
    if (amount === undefined) return end('Invalid amount.');
    if (a3 === undefined)
      return con(`Cash-in ${money(amount, a.currency)} to ${customer}?\nEnter PIN to confirm`);
    if (!isPin(a3)) return end('A PIN is 4 to 6 digits.');
    if (!(await pinOk(a3))) return end('Wrong PIN.');
    return once(deps, ctx, tenantId, agentRoute, form, (q) =>
      cashIn(deps, q, tenantId, a, customer, a2, form, ctx.requestId),
    );
  }
  return invalidChoice;
}
