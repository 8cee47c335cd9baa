/**
 * What every agent module shares: the database, keys, clock and the customer identity
 * building blocks (one PinHasher with its argon2 semaphore, the tenant secrets, the SMS
 * sender), plus the request helpers for the agent caller (token + live agent session).
 */
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Logger } from 'pino';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { appendAudit } from '../../shared/audit.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import type { IdentityDeps } from '../identity/context.ts';
import type { KeyStore } from '../keys/keys.ts';
import { accessAudience, accessTyp } from '../identity/tokens.ts';
import { principalOf } from '../idempotency/idempotency.ts';
import { bearerToken } from '../../shared/bearer.ts';

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

const Claims = TypeCompiler.Compile(
  Type.Object({
    sub: Type.String({ minLength: 1 }),
    tid: Type.String({ minLength: 1 }),
    sid: Type.String({ minLength: 1 }),
    aal: Type.Integer({ minimum: 1, maximum: 3 }),
  }),
);

/**
 * The agent behind `Authorization: Bearer <access token>`: signature, audience, type and
 * expiry, a live session of subject_type 'agent' in that tenant, an active agent, and (defence
 * in depth) agreement with the identity headers the edge set. Any failure is 401 INVALID_TOKEN.
 */
export async function agentCaller(deps: AgentDeps, ctx: AnyCtx): Promise<AgentCaller> {
  const s = await agentSession(deps, ctx);
  if (s.status !== 'active') throw new AppError('FORBIDDEN', 'agent is suspended');
  return { kind: 'agent', tenantId: s.tenantId, agentId: s.agentId, sessionId: s.sessionId, aal: s.aal };
}

/**
 * The agent behind the bearer token, whatever the agent's status: signature, audience, type,
 * expiry, agreement with the edge's identity headers, and a live agent session.
 */
export async function agentSession(
  deps: AgentDeps,
  ctx: AnyCtx,
): Promise<{ tenantId: string; agentId: string; sessionId: string; aal: number; status: string }> {
  const token = bearerToken(ctx.headers.authorization);
  if (!token) throw new AppError('INVALID_TOKEN', 'a bearer access token is required');
  let raw: unknown;
  try {
    raw = await deps.keys.verify(token, { audience: accessAudience, typ: accessTyp });
  } catch {
    throw new AppError('INVALID_TOKEN', 'access token is invalid or expired');
  }
  if (!Claims.Check(raw)) throw new AppError('INVALID_TOKEN', 'access token is invalid or expired');
  const id = ctx.identity;
  if (id.tenantId !== undefined && id.tenantId !== raw.tid)
    throw new AppError('TENANT_MISMATCH', 'access token belongs to another tenant');
  if (id.principalId !== undefined && id.principalId !== raw.sub)
    throw new AppError('INVALID_TOKEN', 'access token does not match the authenticated principal');
  const { rows } = await deps.db.query<{ subject_id: string; status: string }>(
    `SELECT s.subject_id, a.status FROM sessions s JOIN agents a ON a.tenant_id = s.tenant_id AND a.id::text = s.subject_id
      WHERE s.tenant_id = $1 AND s.id = $2 AND s.subject_type = 'agent' AND s.revoked_at IS NULL`,
    [raw.tid, raw.sid],
  );
  const row = rows[0];
  if (row?.subject_id !== raw.sub) throw new AppError('INVALID_TOKEN', 'session is revoked or unknown');
  return { tenantId: raw.tid, agentId: raw.sub, sessionId: raw.sid, aal: raw.aal, status: row.status };
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
  q: Queryable,
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
