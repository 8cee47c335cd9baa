/**
 * Payees (issue 7; purpose customer.beneficiary.manage, AAL 2): another customer's wallet in
 * the same tenant, found by phone. Listing needs AAL 2; adding or removing one needs a step-up
 * bound to that very request, used up when the change commits (issue 13 item 1, bound.ts).
 * The answer shows the payee's phone masked.
 */
import { Type } from '@sinclair/typebox';
import { maskPhone } from '../../shared/masking.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { appendAudit } from '../../shared/audit.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { withBoundStepUp } from '../identity/bound.ts';
import { bearerHeader, customerOf, type PaymentsDeps } from './context.ts';
import { declared } from '../http/declared.ts';

const Beneficiary = Type.Object({
  id: Type.String(),
  phone: Type.String({ description: 'masked: first 4 and last 2 characters' }),
  nickname: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
});
const Create = Type.Object(
  {
    phone: Type.String({ pattern: '^\\+[0-9]{7,15}$' }),
    nickname: Type.Optional(Type.String({ minLength: 1, maxLength: 60 })),
  },
  { additionalProperties: false },
);
const IdParams = Type.Object({
  id: Type.String({
    pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
  }),
});

interface Row {
  id: string;
  phone_e164: string;
  nickname: string | null;
  created_at: Date;
}
const view = (r: Row) => ({
  id: r.id,
  phone: maskPhone(r.phone_e164),
  nickname: r.nickname,
  created_at: r.created_at.toISOString(),
});
const select = `SELECT b.id, c.phone_e164, b.nickname, b.created_at FROM beneficiaries b JOIN customers c ON c.tenant_id = b.tenant_id AND c.id = b.payee_customer_id`;

const tags = ['transfers'];

/** POST /v1/beneficiaries. */
const addBeneficiary = (deps: PaymentsDeps) =>
  defineRoute({
    ...declared('POST', '/v1/beneficiaries'),
    operationId: 'addBeneficiary',
    summary: 'Add a payee by phone (same tenant)',
    tags,
    headers: [bearerHeader],
    body: Create,
    responses: {
      201: { description: 'Added', schema: Beneficiary },
      200: { description: 'Already a payee', schema: Beneficiary },
    },
    handler: async (ctx) => {
      const caller = await customerOf(deps, ctx);
      const now = deps.now();
      // Issue 13 item 1: a new payee is where stolen money goes: its own bound step-up, used up.
      return withBoundStepUp(deps, caller, ctx, 'beneficiary.create', now, async (q) => {
        const { rows: payees } = await q.query<{ id: string }>(
          `SELECT c.id FROM customers c JOIN credentials cr ON cr.customer_id = c.id AND cr.tenant_id = c.tenant_id
             WHERE c.tenant_id = $1 AND c.phone_e164 = $2 AND c.status = 'active'`,
          [caller.tenantId, ctx.body.phone],
        );
        const payee = payees[0]?.id;
        if (!payee) throw new AppError('PAYEE_NOT_FOUND', 'no wallet with that phone in this tenant');
        if (payee === caller.customerId)
          throw new AppError('CANNOT_PAY_SELF', 'you cannot add yourself as a payee');
        const existing = await q.query<Row>(
          `${select} WHERE b.tenant_id = $1 AND b.customer_id = $2 AND b.payee_customer_id = $3 AND b.removed_at IS NULL`,
          [caller.tenantId, caller.customerId, payee],
        );
        if (existing.rows[0]) return { status: 200, body: view(existing.rows[0]) };
        const id = uuidv7(now);
        // A concurrent add of the same payee (two taps, each stepped up) may commit between the
        // check above and this insert: it then answers like the check, never a 500 (item 8).
        const added = await q.query(
          `INSERT INTO beneficiaries (id, tenant_id, customer_id, payee_customer_id, nickname, created_at) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant_id, customer_id, payee_customer_id) WHERE removed_at IS NULL DO NOTHING RETURNING id`,
          [id, caller.tenantId, caller.customerId, payee, ctx.body.nickname ?? null, new Date(now)],
        );
        if (added.rows.length === 0) {
          const raced = await q.query<Row>(
            `${select} WHERE b.tenant_id = $1 AND b.customer_id = $2 AND b.payee_customer_id = $3 AND b.removed_at IS NULL`,
            [caller.tenantId, caller.customerId, payee],
          );
          if (raced.rows[0]) return { status: 200, body: view(raced.rows[0]) };
          throw new AppError('CONFLICT', 'the payee changed while it was being added; try again');
        }
        await appendAudit(q, [
          {
            tenantId: caller.tenantId,
            actor: { type: 'customer', id: caller.customerId },
            action: 'beneficiary.create',
            target: { type: 'beneficiary', id },
            decision: { allow: true, aal: caller.aal },
            attrs: { request_id: ctx.requestId },
          },
        ]);
        const { rows } = await q.query<Row>(`${select} WHERE b.tenant_id = $1 AND b.id = $2`, [
          caller.tenantId,
          id,
        ]);
        return { status: 201, body: view(rows[0] as Row) };
      });
    },
  });

/** GET /v1/beneficiaries. */
const listBeneficiaries = (deps: PaymentsDeps) =>
  defineRoute({
    ...declared('GET', '/v1/beneficiaries'),
    operationId: 'listBeneficiaries',
    summary: "The customer's payees (phones masked)",
    tags,
    headers: [bearerHeader],
    responses: { 200: { description: 'Payees', schema: Type.Object({ items: Type.Array(Beneficiary) }) } },
    handler: async (ctx) => {
      const caller = await customerOf(deps, ctx, 2);
      const { rows } = await deps.db.query<Row>(
        `${select} WHERE b.tenant_id = $1 AND b.customer_id = $2 AND b.removed_at IS NULL ORDER BY b.created_at, b.id`,
        [caller.tenantId, caller.customerId],
      );
      return { status: 200, body: { items: rows.map(view) } };
    },
  });

/** DELETE /v1/beneficiaries/{id}. */
const removeBeneficiary = (deps: PaymentsDeps) =>
  defineRoute({
    ...declared('DELETE', '/v1/beneficiaries/{id}'),
    operationId: 'removeBeneficiary',
    summary: 'Remove a payee',
    tags,
    headers: [bearerHeader],
    params: IdParams,
    responses: { 204: { description: 'Removed' } },
    handler: async (ctx) => {
      const caller = await customerOf(deps, ctx);
      await withBoundStepUp(deps, caller, ctx, 'beneficiary.delete', deps.now(), async (q) => {
        const { rowCount } = await q.query(
          `UPDATE beneficiaries SET removed_at = now() WHERE tenant_id = $1 AND id = $2 AND customer_id = $3 AND removed_at IS NULL`,
          [caller.tenantId, ctx.params.id, caller.customerId],
        );
        if (rowCount !== 1) throw new AppError('BENEFICIARY_NOT_FOUND', 'no such beneficiary');
        await appendAudit(q, [
          {
            tenantId: caller.tenantId,
            actor: { type: 'customer', id: caller.customerId },
            action: 'beneficiary.delete',
            target: { type: 'beneficiary', id: ctx.params.id },
            decision: { allow: true, aal: caller.aal },
            attrs: { request_id: ctx.requestId },
          },
        ]);
      });
      return { status: 204 };
    },
  });

export function beneficiaryRoutes(deps: PaymentsDeps): RouteSpec[] {
  return [addBeneficiary(deps), listBeneficiaries(deps), removeBeneficiary(deps)];
}
