/** Transfer routes (SPEC 4.3): POST /v1/transfers and /v1/transfers/confirm, idempotent. */
import { Type } from '@sinclair/typebox';
import { scopeOf, toReply, withIdempotency } from '../idempotency/idempotency.ts';
import { requestOrig, requireBoundStepUp, stepUpRequired, StepUpUsed } from '../identity/bound.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { beneficiaryRoutes } from './beneficiaries.ts';
import {
  bearerHeader,
  customerOf,
  idempotencyHeaderRequired,
  keyOwnerOf,
  requestIp,
  type PaymentsDeps,
} from './context.ts';
import { historyRoutes } from './history.ts';
import { payerGate } from './payer.ts';
import { confirmTransfer, createTransfer } from './transfers.ts';
import { declared } from '../http/declared.ts';

const Uuid = Type.String({
  pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
});
/** Issue 20 item 3 (SPEC 2.7 `payer`): whose wallet pays, when a delegated payer moves another's money. */
const PayerCustomerId = Type.Optional(
  Type.String({
    ...Uuid,
    description:
      'the customer whose wallet pays, when not yours: needs a live payer tuple customer:<you> payer customer:<them>; your own step-up, device signature and limits still apply, and theirs too',
  }),
);
const Decimal = Type.String({
  pattern: '^(0|[1-9][0-9]{0,13})(\\.[0-9]{1,6})?$',
  description: 'decimal string; no more places than the currency has',
});
const CreateBody = Type.Object(
  {
    amount: Decimal,
    currency: Type.String({ pattern: '^[A-Z]{3}$' }),
    beneficiaryId: Type.String({
      pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
    }),
    reference: Type.String({ minLength: 1, maxLength: 64, description: "the client's own reference" }),
    payerCustomerId: PayerCustomerId,
  },
  { additionalProperties: false },
);
const ConfirmBody = Type.Object(
  {
    transferId: Type.String({
      pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
    }),
    payerCustomerId: Type.Optional(
      Type.String({ ...Uuid, description: 'for a delegated transfer: the wallet owner its create named' }),
    ),
  },
  { additionalProperties: false },
);
const Transfer = Type.Object({
  id: Type.String(),
  status: Type.String({ description: 'PENDING, POSTED, FAILED or EXPIRED' }),
  currency: Type.String(),
  amount: Type.String(),
  fee: Type.String(),
  total: Type.String(),
  beneficiary: Type.Object({ id: Type.String(), phone: Type.String() }),
  reference: Type.String(),
  created_at: Type.String(),
  expires_at: Type.String(),
  confirmed_at: Type.Union([Type.String(), Type.Null()]),
  posting_ids: Type.Array(Type.String()),
  payer_customer_id: Type.String({ description: 'whose wallet pays' }),
  initiator_customer_id: Type.String({
    description: 'who made the transfer (a delegated payer, or the owner)',
  }),
});
const intentHeaders = [
  {
    name: 'X-Intent-Device-Id',
    required: true,
    description: 'the registered device (POST /customers/devices) that signed the intent',
  },
  {
    name: 'X-Intent-Signature',
    required: true,
    description:
      'base64url Ed25519 signature over canonical JSON {amount, beneficiary, currency, orig} (SPEC 4.3 rule 4)',
  },
];

export function paymentRoutes(deps: PaymentsDeps): RouteSpec[] {
  const tags = ['transfers'];
  const gate = payerGate(deps.policies);
  return [
    ...beneficiaryRoutes(deps),
    ...historyRoutes(deps),
    defineRoute({
      ...declared('POST', '/v1/transfers'),
      operationId: 'createTransfer',
      tags,
      summary:
        'Quote the fee, check limits, verify the intent signature and hold the money; answers the pending transfer',
      headers: [bearerHeader, idempotencyHeaderRequired, ...intentHeaders],
      body: CreateBody,
      responses: { 200: { description: 'Pending transfer with fee and total', schema: Transfer } },
      handler: async (ctx) => {
        const caller = await customerOf(deps, ctx, 1);
        const scope = scopeOf(ctx, keyOwnerOf(caller), ctx.body);
        const key = scope.key;
        const orig = requestOrig(ctx);
        // SPEC 4.3 rule 2: refused (with a fresh challenge) before anything is stored under the key.
        await requireBoundStepUp(deps, caller, orig, 'this transfer', deps.now());
        const facts = {
          orig,
          intentDeviceId: ctx.headers['x-intent-device-id'],
          intentSignature: ctx.headers['x-intent-signature'],
          requestId: ctx.requestId,
          idempotencyKey: key,
          ip: requestIp(ctx),
        };
        try {
          // A retry with the same key replays the stored answer; the step-up is used once, by the first.
          const res = await withIdempotency(deps, scope, async (q) => ({
            status: 200,
            body: await createTransfer(q, caller, ctx.body, facts, deps.now(), gate),
          }));
          return toReply(res);
        } catch (err) {
          // Used by another transfer (a new Idempotency-Key): nothing was stored under this key.
          if (err instanceof StepUpUsed)
            throw await stepUpRequired(
              deps,
              caller,
              orig,
              'this step-up was already used; step up again for this request',
              deps.now(),
            );
          throw err;
        }
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/transfers/confirm'),
      operationId: 'confirmTransfer',
      tags,
      summary: 'Post a pending transfer to the ledger: payer → payee and fee → fee income, atomically',
      headers: [bearerHeader, idempotencyHeaderRequired],
      body: ConfirmBody,
      responses: { 200: { description: 'Posted transfer', schema: Transfer } },
      handler: async (ctx) => {
        const caller = await customerOf(deps, ctx, 2);
        const scope = scopeOf(ctx, keyOwnerOf(caller), ctx.body);
        const facts = {
          orig: requestOrig(ctx),
          intentDeviceId: undefined,
          intentSignature: undefined,
          requestId: ctx.requestId,
          ip: requestIp(ctx),
        };
        const res = await withIdempotency(deps, scope, (q) =>
          confirmTransfer(q, caller, ctx.body.transferId, facts, deps.now(), gate, ctx.body.payerCustomerId),
        );
        return toReply(res);
      },
    }),
  ];
}
