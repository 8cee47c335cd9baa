/**
 * A tenant's Admin creates outlets and agents (issue 20 item 1; until now only the demo seed
 * could), over the administration conventions (core/admin/http.ts: roles checked again, rate
 * limits, Idempotency-Key required, an audit record in the transaction). An agent is created as
 * the seed creates one (./provision.ts: outlet, float and commission accounts in the tenant's
 * base currency, argon2id PIN, `member` tuple) with a bound device, and its credentials — a
 * random 6-digit PIN and the device's Ed25519 private key (JWK) — are in the 201 answer only:
 * never logged, never in the audit record, sealed in the idempotency record for the same
 * Admin's replay (core/idempotency/secrets.ts: `pin`, `privateKey`), `Cache-Control: no-store`.
 */
import { generateKeyPairSync, randomInt } from 'node:crypto';
import { type Static, Type } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { parseAmount, type Micro } from '../../shared/money.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { adminRoute, type AdminDeps } from '../admin/http.ts';
import { requireMinorUnits } from '../admin/reference/currencies.ts';
import { CurrencyCode, Decimal, Timestamp, Uuid } from '../admin/schemas.ts';
import { Phone } from '../identity/schemas.ts';
import type { RouteSpec } from '../http/route.ts';
import type { IdentityDeps } from '../identity/context.ts';
import { hashAgentPin, insertAgent } from './provision.ts';
import { declared } from '../http/declared.ts';

const Text = (max: number) => Type.String({ minLength: 1, maxLength: max, pattern: '^\\S(.*\\S)?$' });
export const Outlet = Type.Object({
  id: Uuid,
  name: Type.String(),
  region: Type.String(),
  address: Type.String(),
  created_at: Timestamp,
});
export const Tier = Type.Union([Type.Literal('basic'), Type.Literal('standard'), Type.Literal('super')]);
const Agent = Type.Object({
  id: Uuid,
  code: Type.String(),
  phone: Type.String(),
  name: Type.String(),
  tier: Tier,
  outletId: Uuid,
  currency: CurrencyCode,
  floatAccountId: Uuid,
  commissionAccountId: Uuid,
  credentials: Type.Object({
    pin: Type.String({ pattern: '^[0-9]{6}$' }),
    deviceId: Uuid,
    privateKey: Type.Object({
      kty: Type.Literal('OKP'),
      crv: Type.Literal('Ed25519'),
      x: Type.String(),
      d: Type.String(),
    }),
  }),
});
const noStore = { 'cache-control': 'no-store' };
const tags = ['admin.agents'];

export interface OutletRow {
  id: string;
  name: string;
  region: string;
  address: string;
  created_at: Date;
}
export const outletView = (o: OutletRow) => ({
  id: o.id,
  name: o.name,
  region: o.region,
  address: o.address,
  created_at: o.created_at.toISOString(),
});

function limitOf(text: string | undefined, minorUnits: number, field: string): Micro | undefined {
  if (text === undefined) return undefined;
  const p = parseAmount(text, { minorUnits });
  if (!p.ok) throw new AppError('INVALID_AMOUNT', `${field}: ${p.reason}`);
  return p.micro;
}

async function tenantCurrency(q: Queryable, tenantId: string): Promise<string> {
  const { rows } = await q.query<{ base_currency: string }>(
    'SELECT base_currency FROM tenants WHERE id = $1',
    [tenantId],
  );
  const c = rows[0]?.base_currency;
  if (!c) throw new AppError('TENANT_NOT_FOUND', `no tenant ${tenantId}`);
  return c;
}

/** A new device key pair for the agent, bound in the caller's transaction. */
async function bindDevice(q: Queryable, tenantId: string, agentId: string, now: number) {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const id = uuidv7(now);
  await q.query(
    'INSERT INTO agent_devices (id, tenant_id, agent_id, public_key, label, created_at) VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0))',
    [
      id,
      tenantId,
      agentId,
      Buffer.from(String(publicKey.export({ format: 'jwk' }).x), 'base64url'),
      'issued at creation',
      now,
    ],
  );
  const jwk = privateKey.export({ format: 'jwk' });
  return {
    deviceId: id,
    privateKey: { kty: 'OKP' as const, crv: 'Ed25519' as const, x: String(jwk.x), d: String(jwk.d) },
  };
}

const NewAgentBody = Type.Object(
  {
    code: Type.String({ pattern: '^[A-Z0-9]{4,16}$' }),
    phone: Phone,
    name: Text(200),
    outletId: Uuid,
    tier: Type.Optional(Tier),
    txn_max_amount: Type.Optional(Decimal),
    day_max_amount: Type.Optional(Decimal),
  },
  { additionalProperties: false },
);
type NewAgentInput = Static<typeof NewAgentBody>;

/** The outlet must be the tenant's and the code and phone free in the tenant (404, 409 before any write). */
async function requireOutletAndFreeAgent(q: Queryable, tenantId: string, b: NewAgentInput): Promise<void> {
  const outlet = await q.query('SELECT 1 FROM agent_outlets WHERE tenant_id = $1 AND id = $2', [
    tenantId,
    b.outletId,
  ]);
  if (outlet.rows.length === 0) throw new AppError('OUTLET_NOT_FOUND', `no outlet ${b.outletId}`);
  const taken = await q.query(
    'SELECT 1 FROM agents WHERE tenant_id = $1 AND (code = $2 OR phone_e164 = $3)',
    [tenantId, b.code, b.phone],
  );
  if (taken.rows.length > 0) throw new AppError('AGENT_EXISTS', 'an agent with this code or phone exists');
}

/** The 201 body: the agent as created and its credentials, shown this once. */
function createdAgentView(
  b: NewAgentInput,
  a: { id: string; floatAccountId: string; commissionAccountId: string },
  currency: string,
  credentials: Static<typeof Agent>['credentials'],
) {
  return {
    id: a.id,
    code: b.code,
    phone: b.phone,
    name: b.name,
    tier: b.tier ?? 'standard',
    outletId: b.outletId,
    currency,
    floatAccountId: a.floatAccountId,
    commissionAccountId: a.commissionAccountId,
    credentials,
  };
}

function createOutlet(deps: AdminDeps): RouteSpec {
  return adminRoute(deps, {
    ...declared('POST', '/v1/outlets'),
    operationId: 'createOutlet',
    summary: "Create an agent outlet (a shop) in the caller's tenant",
    tags,
    mode: 'create',
    body: Type.Object(
      { name: Text(200), region: Text(100), address: Type.Optional(Type.String({ maxLength: 500 })) },
      { additionalProperties: false },
    ),
    responses: { 201: { description: 'The outlet', schema: Outlet } },
    write: async (ctx, w) => {
      const { rows } = await w.q.query<OutletRow>(
        'INSERT INTO agent_outlets (tenant_id, id, name, region, address) VALUES ($1, $2, $3, $4, $5) RETURNING id, name, region, address, created_at',
        [w.caller.tenantId, uuidv7(deps.now()), ctx.body.name, ctx.body.region, ctx.body.address ?? ''],
      );
      const o = rows[0];
      if (!o) throw new AppError('INTERNAL', 'outlet not stored');
      await w.audit('outlet.create', { type: 'outlet', id: o.id }, { name: o.name, region: o.region });
      return { status: 201, body: outletView(o) };
    },
  });
}

function createAgent(deps: AdminDeps, identity: IdentityDeps): RouteSpec {
  return adminRoute(deps, {
    ...declared('POST', '/v1/agents'),
    operationId: 'createAgent',
    tags,
    mode: 'create',
    summary:
      "Create an agent at one of the tenant's outlets, with its float and commission accounts and a bound device; the PIN and device key are shown once",
    body: NewAgentBody,
    responses: {
      201: { description: 'The agent and its credentials (keep them: never shown again)', schema: Agent },
    },
    write: async (ctx, w) => {
      const tenantId = w.caller.tenantId;
      const b = ctx.body;
      await requireOutletAndFreeAgent(w.q, tenantId, b);
      const currency = await tenantCurrency(w.q, tenantId);
      // Locked, as a schedule's validation reads it: a change of the minor units waits for this
      // agent (then finds its accounts and refuses), or its limits are read with what it left.
      const minor = await requireMinorUnits(w.q, currency, { lock: true });
      const txnMaxAmount = limitOf(b.txn_max_amount, minor, 'txn_max_amount');
      const dayMaxAmount = limitOf(b.day_max_amount, minor, 'day_max_amount');
      const pin = String(randomInt(100_000, 1_000_000));
      const now = deps.now();
      const a = await insertAgent(
        w.q,
        {
          tenantId,
          code: b.code,
          phone: b.phone,
          name: b.name,
          pin,
          currency,
          outletId: b.outletId,
          ...(b.tier ? { tier: b.tier } : {}),
          ...(txnMaxAmount !== undefined ? { txnMaxAmount } : {}),
          ...(dayMaxAmount !== undefined ? { dayMaxAmount } : {}),
        },
        await hashAgentPin(identity, tenantId, pin),
        { type: 'staff', id: w.caller.principalId },
        ctx.requestId,
        now,
      ).catch((err: unknown) => {
        // Two creations of the same code or phone at once both pass the check above; the unique index decides (409, not a 500).
        if ((err as { code?: string }).code === '23505')
          throw new AppError('AGENT_EXISTS', 'an agent with this code or phone exists');
        throw err;
      });
      const device = await bindDevice(w.q, tenantId, a.id, now);
      await w.audit(
        'agent.create',
        { type: 'agent', id: a.id },
        { code: b.code, outlet: b.outletId, device: device.deviceId },
      );
      return { status: 201, headers: noStore, body: createdAgentView(b, a, currency, { pin, ...device }) };
    },
  });
}

export function agentAdminRoutes(deps: AdminDeps, identity: IdentityDeps): RouteSpec[] {
  return [createOutlet(deps), createAgent(deps, identity)];
}
