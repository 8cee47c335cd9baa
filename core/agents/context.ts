/**
 * What every agent module shares: the database, keys, clock and the customer identity
 * building blocks (one PinHasher with its argon2 semaphore, the tenant secrets, the SMS
 * sender), plus the request helpers for the agent caller (token + live agent session).
 */
import type { Logger } from 'pino';
import type { Db, TxClient } from '../../shared/db/pool.ts';
import { appendAudit } from '../../shared/audit.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import type { IdentityDeps } from '../identity/context.ts';
import type { KeyStore } from '../keys/keys.ts';
import { requireLiveSession, verifiedToken } from '../http/access-token.ts';
import { principalOf } from '../idempotency/idempotency.ts';

export interface AgentDeps {
  db: Db;
  keys: KeyStore;
  log: Logger;
  now: () => number;
  identity: IdentityDeps;
}

export type AnyCtx = RequestContext<unknown, unknown, unknown>;

export interface AgentCaller {
  kind: 'agent';
  tenantId: string;
  agentId: string;
  sessionId: string;
  aal: number;
}

export interface OpsCaller {
  kind: 'ops';
  tenantId: string;
  principalId: string;
}

/**
 * The agent behind `Authorization: Bearer <access token>` (agentSession), and an active agent
 * (403 FORBIDDEN when suspended).
 */
export async function agentCaller(deps: AgentDeps, ctx: AnyCtx): Promise<AgentCaller> {
  const s = await agentSession(deps, ctx);
  if (s.status !== 'active') throw new AppError('FORBIDDEN', 'agent is suspended');
  return { kind: 'agent', tenantId: s.tenantId, agentId: s.agentId, sessionId: s.sessionId, aal: s.aal };
}

/**
 * The agent behind the bearer token, whatever the agent's status: the one verifier
 * (shared/access-token.ts, its table of refusal codes), agreement with the edge's identity
 * headers, and a live agent session (core/http/access-token.ts).
 */
export async function agentSession(
  deps: AgentDeps,
  ctx: AnyCtx,
): Promise<{ tenantId: string; agentId: string; sessionId: string; aal: number; status: string }> {
  const { claims } = await verifiedToken(deps.keys, ctx, 'agent', deps.now());
  await requireLiveSession(deps.db, 'agent', claims, deps.now());
  const { rows } = await deps.db.query<{ status: string }>(
    'SELECT status FROM agents WHERE tenant_id = $1 AND id::text = $2',
    [claims.tid, claims.sub],
  );
  const row = rows[0];
  if (!row) throw new AppError('session_revoked', 'session not found');
  return {
    tenantId: claims.tid,
    agentId: claims.sub,
    sessionId: claims.sid,
    aal: claims.aal,
    status: row.status,
  };
}

/** Ops staff (a role of the route's declaration, agent.ops: ops or admin; established by the edge). */
export function opsCaller(ctx: AnyCtx): OpsCaller | undefined {
  const id = ctx.identity;
  if (!id.tenantId || !id.principalId) return undefined;
  if (!id.roles.some((r) => ctx.routeRoles.includes(r))) return undefined;
  return { kind: 'ops', tenantId: id.tenantId, principalId: id.principalId };
}

/** One audit record for an agent-side mutation, in the caller's transaction. Never a secret. */
export async function auditAgent(
  q: TxClient,
  a: {
    tenantId: string;
    actor: { type: string; id: string };
    action: string;
    target: { type: string; id: string };
    attrs?: Record<string, unknown>;
    requestId: string;
    allow?: boolean;
  },
  now: number,
): Promise<void> {
  await appendAudit(q, [
    {
      tenantId: a.tenantId,
      actor: a.actor,
      action: a.action,
      target: a.target,
      decision: { allow: a.allow ?? true, trace_id: a.requestId },
      attrs: a.attrs ?? {},
      ts: new Date(now),
    },
  ]);
}

/** Whose Idempotency-Keys these are (issue 13 item 3): the agent, or the ops staff member. */
export const keyOwnerOf = (c: AgentCaller | OpsCaller) => ({
  tenantId: c.tenantId,
  principal: c.kind === 'agent' ? principalOf('agent', c.agentId) : principalOf('staff', c.principalId),
});

export const actorOf = (c: AgentCaller | OpsCaller) =>
  c.kind === 'agent' ? { type: 'agent', id: c.agentId } : { type: 'ops', id: c.principalId };

/** UTC calendar date of `ms` (the agent business day; a tenant time zone is a follow-up). */
export function businessDate(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}
