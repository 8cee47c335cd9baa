/**
 * What an agent may do right now, and why not (issue 9 item 2). Pure derivation from four
 * facts: the agent's status, its tier, the courses it has passed (a course may unlock a
 * capability: core/agents/training.ts) and its available float. The rules are data below; the
 * loader reads the facts in one place so the route and USSD answer the same.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { displayDecimals } from '../ledger/currency.ts';
import { amountsOf } from '../ledger/reads.ts';
import { format, type Micro } from '../../shared/money.ts';

export type Tier = 'basic' | 'standard' | 'super';
const tierRank: Record<Tier, number> = { basic: 0, standard: 1, super: 2 };

export type ReasonCode = 'AGENT_SUSPENDED' | 'TIER_TOO_LOW' | 'TRAINING_REQUIRED' | 'FLOAT_EMPTY';
export interface Reason {
  code: ReasonCode;
  message: string;
  course?: string;
}
export interface Capability {
  name: string;
  allowed: boolean;
  reasons: Reason[];
}

interface Rule {
  name: string;
  minTier: Tier;
  needsFloat: boolean;
}

/** Capability names are the edge actions they gate (shared/routes/agents.ts). */
export const capabilityRules: readonly Rule[] = Object.freeze([
  { name: 'cashin.create', minTier: 'basic', needsFloat: true },
  { name: 'cashout.create', minTier: 'basic', needsFloat: false },
  { name: 'p2p.assist', minTier: 'standard', needsFloat: false },
  { name: 'kyc.register', minTier: 'basic', needsFloat: false },
  { name: 'kyc.upgrade', minTier: 'standard', needsFloat: false },
  { name: 'float.topup', minTier: 'basic', needsFloat: false },
  { name: 'float.redeem', minTier: 'basic', needsFloat: true },
  { name: 'dispute.create', minTier: 'basic', needsFloat: false },
]);

export interface Facts {
  status: string;
  tier: Tier;
  currency: string;
  floatAvailable: Micro;
  /** Course codes passed by the agent. */
  passed: ReadonlySet<string>;
  /** Course code → capability it unlocks, for the tenant's courses that unlock one. */
  unlocks: ReadonlyArray<{ course: string; capability: string }>;
}

function reasonsFor(
  rule: Rule,
  f: Omit<Facts, 'floatAvailable' | 'currency'> & { floatAvailable?: Micro },
): Reason[] {
  const reasons: Reason[] = [];
  if (f.status !== 'active') reasons.push({ code: 'AGENT_SUSPENDED', message: 'the agent is suspended' });
  if (tierRank[f.tier] < tierRank[rule.minTier])
    reasons.push({
      code: 'TIER_TOO_LOW',
      message: `needs tier ${rule.minTier} or above (agent is ${f.tier})`,
    });
  for (const u of f.unlocks) {
    if (u.capability === rule.name && !f.passed.has(u.course))
      reasons.push({
        code: 'TRAINING_REQUIRED',
        message: `pass the ${u.course} course quiz first`,
        course: u.course,
      });
  }
  if (rule.needsFloat && f.floatAvailable !== undefined && f.floatAvailable <= 0n)
    reasons.push({ code: 'FLOAT_EMPTY', message: 'the float balance is empty; top it up first' });
  return reasons;
}

export function deriveCapabilities(f: Facts): Capability[] {
  return capabilityRules.map((rule) => {
    const reasons = reasonsFor(rule, f);
    return { name: rule.name, allowed: reasons.length === 0, reasons };
  });
}

/**
 * Enforce one capability inside the operation's transaction: status, tier and training, the
 * same rules GET /v1/agent/capabilities shows. The float is not judged here: the ledger refuses
 * an amount the float cannot cover, exactly and under its own lock.
 */
export async function requireCapability(
  q: Queryable,
  tenantId: string,
  agentId: string,
  name: string,
): Promise<void> {
  const rule = capabilityRules.find((r) => r.name === name);
  if (!rule) throw new Error(`unknown agent capability ${name}`);
  const { rows } = await q.query<{ status: string; tier: Tier }>(
    'SELECT status, tier FROM agents WHERE tenant_id = $1 AND id = $2',
    [tenantId, agentId],
  );
  const agent = rows[0];
  if (!agent) throw new AppError('FORBIDDEN', 'agent is not active');
  const courses = await q.query<{ code: string }>(
    'SELECT code FROM agent_courses WHERE tenant_id = $1 AND unlocks = $2',
    [tenantId, name],
  );
  const unlocks = courses.rows.map((r) => ({ course: r.code, capability: name }));
  const passed = unlocks.length > 0 ? await passedCourses(q, tenantId, agentId) : new Set<string>();
  const reasons = reasonsFor(rule, { status: agent.status, tier: agent.tier, passed, unlocks });
  if (reasons.length > 0) {
    throw new AppError(
      'CAPABILITY_REQUIRED',
      `${name} is not allowed: ${reasons.map((r) => r.message).join('; ')}`,
      { extra: { capability: name, reasons } },
    );
  }
}

export interface AgentProfileRow {
  id: string;
  code: string;
  name: string;
  display_name: string | null;
  phone_e164: string;
  status: string;
  tier: Tier;
  language: string;
  currency: string;
  outlet_id: string;
  float_account_id: string;
  commission_account_id: string;
  created_at: Date;
  updated_at: Date;
}

export async function loadAgent(
  q: Queryable,
  tenantId: string,
  agentId: string,
): Promise<AgentProfileRow | undefined> {
  const { rows } = await q.query<AgentProfileRow>(
    `SELECT id, code, name, display_name, phone_e164, status, tier, language, currency, outlet_id, float_account_id, commission_account_id, created_at, updated_at
       FROM agents WHERE tenant_id = $1 AND id = $2`,
    [tenantId, agentId],
  );
  return rows[0];
}

/** Posted credits − posted debits − held debits of a ledger account (its spendable amount). */
export async function availableOf(q: Queryable, tenantId: string, accountId: string): Promise<Micro> {
  const a = await amountsOf(q, tenantId, accountId);
  return a.posted - a.held;
}

export async function passedCourses(q: Queryable, tenantId: string, agentId: string): Promise<Set<string>> {
  const { rows } = await q.query<{ code: string }>(
    `SELECT DISTINCT c.code FROM agent_quiz_attempts a JOIN agent_quizzes z ON z.tenant_id = a.tenant_id AND z.id = a.quiz_id
       JOIN agent_courses c ON c.tenant_id = z.tenant_id AND c.id = z.course_id
      WHERE a.tenant_id = $1 AND a.agent_id = $2 AND a.passed`,
    [tenantId, agentId],
  );
  return new Set(rows.map((r) => r.code));
}

export async function capabilitiesOf(
  q: Queryable,
  tenantId: string,
  a: AgentProfileRow,
): Promise<{ facts: Facts; capabilities: Capability[] }> {
  const { rows } = await q.query<{ code: string; unlocks: string }>(
    'SELECT code, unlocks FROM agent_courses WHERE tenant_id = $1 AND unlocks IS NOT NULL ORDER BY position, code',
    [tenantId],
  );
  const facts: Facts = {
    status: a.status,
    tier: a.tier,
    currency: a.currency,
    floatAvailable: await availableOf(q, tenantId, a.float_account_id),
    passed: await passedCourses(q, tenantId, a.id),
    unlocks: rows.map((r) => ({ course: r.code, capability: r.unlocks })),
  };
  return { facts, capabilities: deriveCapabilities(facts) };
}

export function capabilitiesView(
  a: AgentProfileRow,
  r: { facts: Facts; capabilities: Capability[] },
): Record<string, unknown> {
  return {
    agentId: a.id,
    status: a.status,
    tier: a.tier,
    float: { currency: a.currency, available: format(r.facts.floatAvailable, displayDecimals(a.currency)) },
    trainingPassed: [...r.facts.passed].sort(),
    capabilities: r.capabilities,
  };
}
