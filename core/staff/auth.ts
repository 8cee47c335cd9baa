/**
 * The staff member behind `Authorization: Bearer <staff access token>` (core/staff/tokens.ts):
 * signature under the tenant's keys, audience "staff", type at+jwt, expiry, a live session of
 * that member, and the member still active (a deprovisioned person's token stops working at
 * once, issue 14 item 1). Routes acting for the signed-in person (passkeys, sessions, sign-out,
 * step-up) check it here themselves: the edge passes them as public until it verifies staff
 * tokens too. Every failure is 401 INVALID_TOKEN.
 */
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { bearerToken } from '../../shared/bearer.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { requireTokenProof } from '../http/dpop.ts';
import type { RequestContext } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { staffUserById, type StaffUser } from './store.ts';
import { staffAudience, staffTokenTyp } from './tokens.ts';

const Claims = TypeCompiler.Compile(
  Type.Object({
    sub: Type.String({ minLength: 1 }),
    tid: Type.String({ minLength: 1 }),
    sid: Type.String({ minLength: 1 }),
    jti: Type.String({ minLength: 1 }),
    aal: Type.Union([Type.Literal(1), Type.Literal(2)]),
    amr: Type.Array(Type.String()),
    exp: Type.Number(),
    orig: Type.Optional(Type.String()),
    cnf: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  }),
);

export interface StaffCaller {
  tenantId: string;
  user: StaffUser;
  sessionId: string;
  aal: 1 | 2;
  amr: string[];
  jti: string;
  orig?: string;
  cnf?: Record<string, unknown>;
}

const refused = (why: string) => new AppError('INVALID_TOKEN', why);

type Ctx = Pick<RequestContext<unknown, unknown, unknown>, 'headers' | 'path' | 'identity' | 'method'>;

export async function authenticateStaff(
  deps: { keys: KeyStore; db: Queryable; now: () => number },
  ctx: Ctx,
): Promise<StaffCaller> {
  const { keys, db: q } = deps;
  const { headers, identity } = ctx;
  const token = bearerToken(headers.authorization);
  if (!token) throw refused('a staff access token is required');
  let raw: unknown;
  try {
    raw = await keys.verify(token, { audience: staffAudience, typ: staffTokenTyp });
  } catch {
    throw refused('access token is invalid or expired');
  }
  if (!Claims.Check(raw)) throw refused('access token is invalid or expired');
  if (identity.tenantId !== undefined && identity.tenantId !== raw.tid)
    throw new AppError('TENANT_MISMATCH', 'access token belongs to another tenant');
  const { rows } = await q.query<{ subject_id: string }>(
    `SELECT subject_id FROM sessions WHERE tenant_id = $1 AND id = $2 AND subject_type = 'user' AND revoked_at IS NULL`,
    [raw.tid, raw.sid],
  );
  if (rows[0]?.subject_id !== raw.sub) throw refused('session is revoked or unknown');
  const user = await staffUserById(q, raw.tid, raw.sub);
  if (!user || user.deletedAt || !user.active) throw refused('the staff member is deactivated');
  // Issue 17 item 3: a token bound by a DPoP refresh is no bearer token here either.
  const jkt = raw.cnf?.jkt;
  if (jkt !== undefined) await requireTokenProof(deps, ctx, token, typeof jkt === 'string' ? jkt : '');
  return {
    tenantId: raw.tid,
    user,
    sessionId: raw.sid,
    aal: raw.aal,
    amr: raw.amr,
    jti: raw.jti,
    ...(raw.orig ? { orig: raw.orig } : {}),
    ...(raw.cnf ? { cnf: raw.cnf } : {}),
  };
}
