/**
 * KYC by agents (issue 9 item 3). Level 1: full name, ID type and number, date of birth and a
 * verified phone (the customer proved it with the customer OTP flow); screened against the
 * tenant's watch-list. Level 2: documents (stored by SHA-256). Records expire (`kycValidityMs`)
 * and need re-KYC; an expired record selects no limits (cash-in/out answer KYC_REQUIRED).
 */
import { type Static, Type } from '@sinclair/typebox';
import { AppError, toCoreBody } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader, scopeOf, toReply, withIdempotency } from '../idempotency/idempotency.ts';
import { Phone } from '../identity/schemas.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { agentCaller, auditAgent, keyOwnerOf, type AgentDeps, type AnyCtx } from './context.ts';
import { requireCapability } from './capabilities.ts';
import { Uuid } from '../ledger/schemas.ts';
import { declared } from '../http/declared.ts';

/** A KYC record is valid two years, then re-KYC is due. */
export const kycValidityMs = 2 * 365 * 24 * 60 * 60_000;
const minAgeYears = 18;
const tags = ['kyc'];
const headers = [
  { name: 'Authorization', required: true, description: 'Bearer <agent access token>' },
  idempotencyHeader,
];
const CustomerId = Type.Object({ customer_id: Uuid });
const IdType = Type.Union([Type.Literal('NATIONAL_ID'), Type.Literal('PASSPORT'), Type.Literal('ALIEN_ID')]);
const IdNumber = Type.String({ pattern: '^[A-Z0-9]{5,20}$' });
const RegisterBody = Type.Object(
  {
    phone: Phone,
    fullName: Type.String({ minLength: 3, maxLength: 120 }),
    idType: IdType,
    idNumber: IdNumber,
    dateOfBirth: Type.String({ pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' }),
  },
  { additionalProperties: false },
);
const Doc = Type.Object(
  {
    kind: Type.Union([
      Type.Literal('ID_FRONT'),
      Type.Literal('ID_BACK'),
      Type.Literal('SELFIE'),
      Type.Literal('PROOF_OF_ADDRESS'),
    ]),
    sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  },
  { additionalProperties: false },
);
const UpgradeBody = Type.Object(
  { documents: Type.Array(Doc, { minItems: 2, maxItems: 6 }) },
  { additionalProperties: false },
);
const RekycBody = Type.Object({ idNumber: IdNumber }, { additionalProperties: false });
const Status = Type.Object({
  customerId: Type.String(),
  level: Type.Integer(),
  status: Type.String(),
  expiresAt: Type.String(),
  reKycDue: Type.Boolean(),
});

export const normaliseName = (n: string) =>
  n
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z ]/g, '')
    .replace(/\s+/g, ' ')
    .trim();

interface Profile {
  customer_id: string;
  level: number;
  status: string;
  expires_at: Date;
  id_number: string;
}

async function profile(q: Queryable, tenantId: string, customerId: string, lock = false): Promise<Profile> {
  const { rows } = await q.query<Profile>(
    `SELECT customer_id, level, status, expires_at, id_number FROM kyc_profiles WHERE tenant_id = $1 AND customer_id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, customerId],
  );
  if (!rows[0]) throw new AppError('CUSTOMER_NOT_FOUND', 'no KYC record for this customer');
  return rows[0];
}

function statusView(p: Profile, now: number) {
  const expired = p.expires_at.getTime() <= now;
  return {
    customerId: p.customer_id,
    level: p.level,
    status: expired && p.status === 'ACTIVE' ? 'EXPIRED' : p.status,
    expiresAt: p.expires_at.toISOString(),
    reKycDue: expired,
  };
}

function ageYears(dob: string, now: number): number {
  const d = new Date(`${dob}T00:00:00Z`);
  if (Number.isNaN(d.getTime()) || d.toISOString().slice(0, 10) !== dob)
    throw new AppError('VALIDATION_FAILED', 'dateOfBirth is not a calendar date');
  const n = new Date(now);
  let age = n.getUTCFullYear() - d.getUTCFullYear();
  if (
    n.getUTCMonth() < d.getUTCMonth() ||
    (n.getUTCMonth() === d.getUTCMonth() && n.getUTCDate() < d.getUTCDate())
  )
    age--;
  return age;
}

type Caller = Awaited<ReturnType<typeof agentCaller>>;

/** A KYC write by the calling agent in its idempotent frame. */
const run = async (
  deps: AgentDeps,
  ctx: AnyCtx,
  fn: (q: TxClient, c: Caller, t: number) => Promise<{ status: number; body: unknown }>,
) => {
  const c = await agentCaller(deps, ctx);
  return toReply(await withIdempotency(deps, scopeOf(ctx, keyOwnerOf(c)), (q) => fn(q, c, deps.now())));
};

/** The active customer with this phone, which the customer has verified by OTP. */
async function verifiedCustomer(q: Queryable, tenantId: string, phone: string): Promise<{ id: string }> {
  const { rows } = await q.query<{ id: string; phone_verified_at: Date | null }>(
    `SELECT id, phone_verified_at FROM customers WHERE tenant_id = $1 AND phone_e164 = $2 AND status = 'active'`,
    [tenantId, phone],
  );
  const cust = rows[0];
  if (!cust?.phone_verified_at)
    throw new AppError('PHONE_NOT_VERIFIED', 'the customer must verify this phone first (customer OTP)');
  return cust;
}

/** The watch-list screen: a match is audited (committed) and answered 422; no match, undefined. */
async function watchlistRefusal(
  q: TxClient,
  c: Caller,
  customerId: string,
  b: Static<typeof RegisterBody>,
  requestId: string,
  t: number,
): Promise<{ status: number; body: unknown } | undefined> {
  const hits = await q.query<{ id: string; reason: string }>(
    `SELECT id, reason FROM kyc_watchlist WHERE tenant_id = $1 AND (name_norm = $2 OR id_number = $3)`,
    [c.tenantId, normaliseName(b.fullName), b.idNumber],
  );
  if (hits.rows.length === 0) return undefined;
  // The hit is recorded (committed) and answered; the customer is not registered.
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: { type: 'agent', id: c.agentId },
      action: 'kyc.screen',
      target: { type: 'customer', id: customerId },
      attrs: { outcome: 'watchlist_match', entries: hits.rows.map((h) => h.id) },
      requestId,
      allow: false,
    },
    t,
  );
  return {
    status: 422,
    body: toCoreBody(
      new AppError('WATCHLIST_MATCH', 'registration needs compliance review (watch-list match)'),
    ),
  };
}

function kycRegister(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/kyc/customers'),
    operationId: 'kycRegister',
    tags,
    headers,
    body: RegisterBody,
    summary:
      'Register a customer at KYC level 1 (verified phone, name, ID, date of birth), screened against the watch-list',
    responses: { 201: { description: 'Registered', schema: Status } },
    handler: (ctx) =>
      run(deps, ctx, async (q, c, t) => {
        await requireCapability(q, c.tenantId, c.agentId, 'kyc.register');
        const b = ctx.body;
        if (ageYears(b.dateOfBirth, t) < minAgeYears)
          throw new AppError('UNPROCESSABLE', `customers must be at least ${minAgeYears}`);
        const cust = await verifiedCustomer(q, c.tenantId, b.phone);
        const refusal = await watchlistRefusal(q, c, cust.id, b, ctx.requestId, t);
        if (refusal) return refusal;
        const actor = { type: 'agent', id: c.agentId };
        const ins = await q.query(
          `INSERT INTO kyc_profiles (tenant_id, customer_id, level, status, full_name, id_type, id_number, date_of_birth, registered_by, screening, expires_at, created_at, updated_at)
           VALUES ($1, $2, 1, 'ACTIVE', $3, $4, $5, $6::date, $7, $8, to_timestamp($9 / 1000.0), to_timestamp($10 / 1000.0), to_timestamp($10 / 1000.0))
           ON CONFLICT DO NOTHING`,
          [
            c.tenantId,
            cust.id,
            b.fullName,
            b.idType,
            b.idNumber,
            b.dateOfBirth,
            c.agentId,
            JSON.stringify({ watchlist: 'clear', at: new Date(t).toISOString() }),
            t + kycValidityMs,
            t,
          ],
        );
        if (ins.rowCount !== 1) throw new AppError('KYC_EXISTS', 'this customer or ID is already registered');
        await auditAgent(
          q,
          {
            tenantId: c.tenantId,
            actor,
            action: 'kyc.register',
            target: { type: 'customer', id: cust.id },
            attrs: { level: 1, id_type: b.idType, watchlist: 'clear' },
            requestId: ctx.requestId,
          },
          t,
        );
        return { status: 201, body: statusView(await profile(q, c.tenantId, cust.id), t) };
      }),
  });
}

function kycUpgrade(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/kyc/customers/{customer_id}/upgrade'),
    operationId: 'kycUpgrade',
    tags,
    headers,
    params: CustomerId,
    body: UpgradeBody,
    summary: 'Upgrade to level 2 with documents (ID and selfie at least), stored by SHA-256',
    responses: { 200: { description: 'Upgraded', schema: Status } },
    handler: (ctx) =>
      run(deps, ctx, async (q, c, t) => {
        await requireCapability(q, c.tenantId, c.agentId, 'kyc.upgrade');
        const p = await profile(q, c.tenantId, ctx.params.customer_id, true);
        const kinds = new Set(ctx.body.documents.map((d) => d.kind));
        if (!kinds.has('SELFIE') || !(kinds.has('ID_FRONT') || kinds.has('ID_BACK')))
          throw new AppError('UNPROCESSABLE', 'level 2 needs an ID image and a selfie');
        if (statusView(p, t).status !== 'ACTIVE')
          throw new AppError('KYC_REQUIRED', 're-KYC the customer before upgrading');
        for (const d of ctx.body.documents) {
          await q.query(
            'INSERT INTO kyc_documents (id, tenant_id, customer_id, kind, sha256, created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7 / 1000.0))',
            [uuidv7(t), c.tenantId, p.customer_id, d.kind, d.sha256, c.agentId, t],
          );
        }
        await q.query(
          'UPDATE kyc_profiles SET level = 2, updated_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND customer_id = $2',
          [c.tenantId, p.customer_id, t],
        );
        await auditAgent(
          q,
          {
            tenantId: c.tenantId,
            actor: { type: 'agent', id: c.agentId },
            action: 'kyc.upgrade',
            target: { type: 'customer', id: p.customer_id },
            attrs: { level: 2, documents: ctx.body.documents.length },
            requestId: ctx.requestId,
          },
          t,
        );
        return { status: 200, body: statusView(await profile(q, c.tenantId, p.customer_id), t) };
      }),
  });
}

function kycRekyc(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('POST', '/v1/kyc/customers/{customer_id}/rekcy'),
    operationId: 'kycRekyc',
    tags,
    headers,
    params: CustomerId,
    body: RekycBody,
    summary:
      'Re-KYC (path spelled as in SPEC 4.5): confirm the ID number; the record is valid again for two years',
    responses: { 200: { description: 'Renewed', schema: Status } },
    handler: (ctx) =>
      run(deps, ctx, async (q, c, t) => {
        const p = await profile(q, c.tenantId, ctx.params.customer_id, true);
        if (p.id_number !== ctx.body.idNumber)
          throw new AppError('UNPROCESSABLE', 'ID number does not match the record');
        if (p.status === 'BLOCKED') throw new AppError('FORBIDDEN', 'record is blocked by compliance');
        await q.query(
          `UPDATE kyc_profiles SET status = 'ACTIVE', expires_at = to_timestamp($3 / 1000.0), updated_at = to_timestamp($4 / 1000.0) WHERE tenant_id = $1 AND customer_id = $2`,
          [c.tenantId, p.customer_id, t + kycValidityMs, t],
        );
        await auditAgent(
          q,
          {
            tenantId: c.tenantId,
            actor: { type: 'agent', id: c.agentId },
            action: 'kyc.rekyc',
            target: { type: 'customer', id: p.customer_id },
            attrs: {},
            requestId: ctx.requestId,
          },
          t,
        );
        return { status: 200, body: statusView(await profile(q, c.tenantId, p.customer_id), t) };
      }),
  });
}

function kycStatus(deps: AgentDeps): RouteSpec {
  return defineRoute({
    ...declared('GET', '/v1/kyc/customers/{customer_id}/status'),
    operationId: 'kycStatus',
    tags,
    headers: [headers[0] as { name: string; required: boolean; description: string }],
    params: CustomerId,
    summary: "A customer's KYC level, status and re-KYC due date",
    responses: { 200: { description: 'Status', schema: Status } },
    handler: async (ctx) => {
      const c = await agentCaller(deps, ctx);
      return {
        status: 200,
        body: statusView(await profile(deps.db, c.tenantId, ctx.params.customer_id), deps.now()),
      };
    },
  });
}

export function kycRoutes(deps: AgentDeps): RouteSpec[] {
  return [kycRegister(deps), kycUpgrade(deps), kycRekyc(deps), kycStatus(deps)];
}
