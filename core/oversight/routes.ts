/**
 * The staff purposes of the signed registry through the API (issue 20 item 4; SPEC 2.5):
 * support lookups (masked), fraud review and holds (full, AAL 2 for people), compliance KYC
 * reads (reason recorded), analytics aggregates (group-size floor) and the customer's own
 * consents with the consent-gated marketing offers. The route declarations (shared/routes/oversight.ts)
 * fixes each route's purpose; the role is checked again here.
 */
import { Type } from '@sinclair/typebox';
import { appendAudit } from '../../shared/audit.ts';
import { maskName, maskPhone } from '../../shared/masking.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { bearerHeader, customerOf } from '../payments/context.ts';
import type { KeyStore } from '../keys/keys.ts';
import { aggregate, AggregateQuery, AggregateResult, refuseRawRows } from './aggregates.ts';
import {
  Consent,
  ConsentParams,
  GrantBody,
  grantConsent,
  listConsents,
  requireConsent,
  withdrawConsent,
  type ConsentActor,
} from './consents.ts';
import { auditOf, staffHeader, staffOf, type OversightDeps } from './context.ts';
import {
  FraudHold,
  HoldParams,
  HoldQuery,
  LiftBody,
  liftHold,
  listHolds,
  PlaceBody,
  placeHold,
} from './fraud-holds.ts';
import { accessReason, KycParams, KycRecord, readKyc, reasonHeader } from './kyc.ts';
import { customerView, CustomerView, PhoneQuery } from './view.ts';
import { declared } from '../http/declared.ts';

type Deps = OversightDeps & { keys: KeyStore };
type AnyCtx = Parameters<RouteSpec['handler']>[0];

/** Support and fraud see the same customer; the edge's masking obligation sets the level. */
function lookupRoute(deps: Deps, path: string, operationId: string, summary: string): RouteSpec {
  return defineRoute({
    ...declared('GET', path),
    operationId,
    summary,
    tags: ['staff purposes'],
    headers: [staffHeader],
    query: PhoneQuery,
    responses: { 200: { description: 'The customer, accounts and recent transfers', schema: CustomerView } },
    handler: async (ctx) => {
      const c = staffOf(ctx);
      const body = await deps.db.tx(async (q) => {
        const v = await customerView(q, c.tenantId, ctx.query.phone, ctx.headers['x-masking']);
        const a = auditOf(ctx, c);
        await appendAudit(q, [
          {
            tenantId: c.tenantId,
            ...a,
            action: 'customer.read',
            target: { type: 'customer', id: v.customer.id },
            attrs: { ...a.attrs, masking: v.masking },
            ts: new Date(deps.now()),
          },
        ]);
        return v;
      });
      return { status: 200, body };
    },
  });
}

function fraudRoutes(deps: Deps): RouteSpec[] {
  const tags = ['staff purposes'];
  return [
    defineRoute({
      ...declared('GET', '/v1/fraud/holds'),
      operationId: 'listFraudHolds',
      summary: 'Fraud holds of the tenant, newest first (optionally of one wallet)',
      tags,
      headers: [staffHeader],
      query: HoldQuery,
      responses: { 200: { description: 'Holds', schema: Type.Object({ items: Type.Array(FraudHold) }) } },
      handler: async (ctx) => ({
        status: 200,
        body: { items: await listHolds(deps.db, staffOf(ctx).tenantId, ctx.query.accountId) },
      }),
    }),
    defineRoute({
      ...declared('POST', '/v1/fraud/holds'),
      operationId: 'placeFraudHold',
      tags,
      headers: [staffHeader],
      body: PlaceBody,
      summary:
        'Place a fraud hold on a wallet: debits and new holds refused (ACCOUNT_FROZEN), credits still arrive; the customer is notified',
      responses: { 201: { description: 'The hold', schema: FraudHold } },
      handler: async (ctx) => {
        const c = staffOf(ctx);
        return { status: 201, body: await deps.db.tx((q) => placeHold(q, ctx, c, ctx.body, deps.now())) };
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/fraud/holds/{id}:lift'),
      operationId: 'liftFraudHold',
      tags,
      headers: [staffHeader],
      params: HoldParams,
      body: LiftBody,
      summary:
        'Lift a fraud hold: only a different fraud officer than the one who placed it (403 SECOND_OFFICER_REQUIRED)',
      responses: { 200: { description: 'The lifted hold', schema: FraudHold } },
      handler: async (ctx) => {
        const c = staffOf(ctx);
        return {
          status: 200,
          body: await deps.db.tx((q) => liftHold(q, ctx, c, ctx.params.id, ctx.body.reason, deps.now())),
        };
      },
    }),
  ];
}

function complianceAndAnalytics(deps: Deps): RouteSpec[] {
  const tags = ['staff purposes'];
  return [
    defineRoute({
      ...declared('GET', '/v1/compliance/customers/{customerId}/kyc'),
      operationId: 'complianceKyc',
      tags,
      summary:
        "A customer's KYC record and documents; the officer's stated reason is recorded with the access",
      headers: [staffHeader, reasonHeader],
      params: KycParams,
      responses: { 200: { description: 'KYC record', schema: KycRecord } },
      handler: async (ctx) => {
        const c = staffOf(ctx);
        const reason = accessReason(ctx.headers);
        return {
          status: 200,
          body: await deps.db.tx((q) => readKyc(q, ctx, c, ctx.params.customerId, reason, deps.now())),
        };
      },
    }),
    defineRoute({
      ...declared('GET', '/v1/analytics/aggregates'),
      operationId: 'analyticsAggregates',
      tags,
      headers: [staffHeader],
      query: AggregateQuery,
      summary:
        'Aggregates of posted transfers; groups of fewer than 10 customers are never answered, row requests refused (RAW_ROWS_DENIED)',
      responses: { 200: { description: 'Aggregates', schema: AggregateResult } },
      handler: async (ctx) => {
        const c = staffOf(ctx);
        refuseRawRows(ctx.req.url ?? '');
        return { status: 200, body: await aggregate(deps.db, c.tenantId, ctx.query) };
      },
    }),
  ];
}

async function consentActor(deps: Deps, ctx: AnyCtx): Promise<ConsentActor> {
  const caller = await customerOf({ db: deps.db, keys: deps.keys, now: deps.now }, ctx, 1);
  return {
    tenantId: caller.tenantId,
    customerId: caller.customerId,
    audit: auditOf(ctx, { principalId: caller.customerId }, 'customer'),
  };
}

const Offer = Type.Object({ id: Type.String(), title: Type.String(), reason: Type.String() });

const tags = ['consents'];

const listConsentsRoute = (deps: Deps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/consents'),
    operationId: 'listConsents',
    summary: "The customer's consents, live and withdrawn",
    tags,
    headers: [bearerHeader],
    responses: { 200: { description: 'Consents', schema: Type.Object({ items: Type.Array(Consent) }) } },
    handler: async (ctx) => {
      const a = await consentActor(deps, ctx);
      return { status: 200, body: { items: await listConsents(deps.db, a.tenantId, a.customerId) } };
    },
  });

const grantConsentRoute = (deps: Deps): RouteSpec =>
  defineRoute({
    ...declared('PUT', '/v1/consents/{purpose}'),
    operationId: 'grantConsent',
    summary: 'Grant a consent-gated purpose under the terms version accepted',
    tags,
    headers: [bearerHeader],
    params: ConsentParams,
    body: GrantBody,
    responses: { 200: { description: 'The live consent', schema: Consent } },
    handler: async (ctx) => {
      const a = await consentActor(deps, ctx);
      return {
        status: 200,
        body: await deps.db.tx((q) =>
          grantConsent(q, a, ctx.params.purpose, ctx.body.termsVersion, deps.now()),
        ),
      };
    },
  });

const withdrawConsentRoute = (deps: Deps): RouteSpec =>
  defineRoute({
    ...declared('DELETE', '/v1/consents/{purpose}'),
    operationId: 'withdrawConsent',
    summary: 'Withdraw a consent; the edge refuses the purpose from the next request',
    tags,
    headers: [bearerHeader],
    params: ConsentParams,
    responses: { 200: { description: 'The withdrawn consent', schema: Consent } },
    handler: async (ctx) => {
      const a = await consentActor(deps, ctx);
      return {
        status: 200,
        body: await deps.db.tx((q) => withdrawConsent(q, a, ctx.params.purpose, deps.now())),
      };
    },
  });

const marketingOffersRoute = (deps: Deps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/marketing/offers'),
    operationId: 'marketingOffers',
    tags: ['staff purposes'],
    headers: [bearerHeader],
    summary: 'Personalised offers: only for a customer with a recorded opt-in (marketing.personalize)',
    responses: {
      200: {
        description: 'Offers',
        schema: Type.Object({
          profile: Type.Object({ phone: Type.String(), name: Type.Union([Type.String(), Type.Null()]) }),
          items: Type.Array(Offer),
        }),
      },
    },
    handler: async (ctx) => {
      const a = await consentActor(deps, ctx);
      await requireConsent(deps.db, a.tenantId, a.customerId, 'marketing.personalize');
      const { rows } = await deps.db.query<{ phone_e164: string; full_name: string | null; n: string }>(
        `SELECT c.phone_e164, k.full_name, (SELECT count(*) FROM transfers t WHERE t.tenant_id = c.tenant_id AND t.payer_customer_id = c.id AND t.status = 'POSTED')::text AS n
             FROM customers c LEFT JOIN kyc_profiles k ON k.tenant_id = c.tenant_id AND k.customer_id = c.id WHERE c.tenant_id = $1 AND c.id = $2`,
        [a.tenantId, a.customerId],
      );
      const me = rows[0];
      // customer_profile is `masked` for this purpose (registry field_policies).
      const items =
        Number(me?.n ?? 0) > 0
          ? [
              {
                id: 'fee-free-weekend',
                title: 'Fee-free transfers this weekend',
                reason: 'you send money regularly',
              },
            ]
          : [
              {
                id: 'first-transfer',
                title: 'Your first transfer is free',
                reason: 'you have not sent money yet',
              },
            ];
      return {
        status: 200,
        body: {
          profile: {
            phone: maskPhone(me?.phone_e164 ?? ''),
            name: me?.full_name ? maskName(me.full_name) : null,
          },
          items,
        },
      };
    },
  });

function customerRoutes(deps: Deps): RouteSpec[] {
  return [
    listConsentsRoute(deps),
    grantConsentRoute(deps),
    withdrawConsentRoute(deps),
    marketingOffersRoute(deps),
  ];
}

export function oversightRoutes(deps: Deps): RouteSpec[] {
  return [
    lookupRoute(
      deps,
      '/v1/support/customers',
      'supportLookup',
      'Support: a customer by phone with accounts and history, name, phone and card numbers masked',
    ),
    lookupRoute(
      deps,
      '/v1/fraud/customers',
      'fraudLookup',
      'Fraud review: a customer by phone with accounts and history, full view',
    ),
    ...fraudRoutes(deps),
    ...complianceAndAnalytics(deps),
    ...customerRoutes(deps),
  ];
}
