/**
 * Customers' consents (issue 20 item 4; SPEC 2.5 `consent_required`): a customer grants a
 * consent-gated purpose with the terms version they accepted, and withdraws it, through their
 * own API. The row change NOTIFYs `consents_changed` (migration 0860) and the edge drops its
 * cached consents, so a withdrawal is refused at the edge from the next request. Both audited.
 */
import { Type } from '@sinclair/typebox';
import { appendAudit } from '../../shared/audit.ts';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { uuidv7 } from '../../shared/uuid.ts';

/** The purposes whose registry entry sets consent_required (a customer cannot consent to anything else). */
export const consentPurposes = ['marketing.personalize'] as const;

export const ConsentParams = Type.Object({
  purpose: Type.Union(consentPurposes.map((p) => Type.Literal(p))),
});
export const GrantBody = Type.Object(
  { termsVersion: Type.String({ pattern: '^[A-Za-z0-9._-]{1,40}$' }) },
  { additionalProperties: false },
);
export const Consent = Type.Object({
  purpose: Type.String(),
  terms_version: Type.String(),
  granted_at: Type.String(),
  withdrawn_at: Type.Union([Type.String(), Type.Null()]),
});

interface Row {
  purpose: string;
  terms_version: string;
  granted_at: Date;
  withdrawn_at: Date | null;
}
const view = (r: Row) => ({
  purpose: r.purpose,
  terms_version: r.terms_version,
  granted_at: r.granted_at.toISOString(),
  withdrawn_at: r.withdrawn_at?.toISOString() ?? null,
});

export interface ConsentActor {
  tenantId: string;
  customerId: string;
  audit: {
    actor: { type: string; id: string };
    decision: Record<string, unknown>;
    attrs: Record<string, unknown>;
  };
}

export async function listConsents(q: Queryable, tenantId: string, customerId: string) {
  const { rows } = await q.query<Row>(
    'SELECT purpose, terms_version, granted_at, withdrawn_at FROM customer_consents WHERE tenant_id = $1 AND customer_id = $2 ORDER BY granted_at DESC, id DESC LIMIT 200',
    [tenantId, customerId],
  );
  return rows.map(view);
}

/** Grant (or re-grant under newer terms: the live row is closed and a new one opened). Idempotent for the same terms. */
export async function grantConsent(
  q: TxClient,
  a: ConsentActor,
  purpose: string,
  termsVersion: string,
  now: number,
) {
  const { rows: live } = await q.query<Row>(
    `SELECT purpose, terms_version, granted_at, withdrawn_at FROM customer_consents
      WHERE tenant_id = $1 AND customer_id = $2 AND purpose = $3 AND withdrawn_at IS NULL FOR UPDATE`,
    [a.tenantId, a.customerId, purpose],
  );
  if (live[0]?.terms_version === termsVersion) return view(live[0]);
  const at = new Date(now);
  if (live[0])
    await q.query(
      'UPDATE customer_consents SET withdrawn_at = $4 WHERE tenant_id = $1 AND customer_id = $2 AND purpose = $3 AND withdrawn_at IS NULL',
      [a.tenantId, a.customerId, purpose, at],
    );
  const { rows } = await q.query<Row>(
    `INSERT INTO customer_consents (tenant_id, customer_id, id, purpose, terms_version, granted_at) VALUES ($1, $2, $3, $4, $5, $6)
     RETURNING purpose, terms_version, granted_at, withdrawn_at`,
    [a.tenantId, a.customerId, uuidv7(now), purpose, termsVersion, at],
  );
  await appendAudit(q, [
    {
      tenantId: a.tenantId,
      ...a.audit,
      action: 'consent.grant',
      target: { type: 'consent', id: purpose },
      attrs: { ...a.audit.attrs, terms_version: termsVersion },
      ts: at,
    },
  ]);
  return view(rows[0] as Row);
}

export async function withdrawConsent(q: TxClient, a: ConsentActor, purpose: string, now: number) {
  const at = new Date(now);
  const { rows } = await q.query<Row>(
    `UPDATE customer_consents SET withdrawn_at = $4 WHERE tenant_id = $1 AND customer_id = $2 AND purpose = $3 AND withdrawn_at IS NULL
     RETURNING purpose, terms_version, granted_at, withdrawn_at`,
    [a.tenantId, a.customerId, purpose, at],
  );
  if (!rows[0]) throw new AppError('CONSENT_NOT_FOUND', 'no live consent for that purpose');
  await appendAudit(q, [
    {
      tenantId: a.tenantId,
      ...a.audit,
      action: 'consent.withdraw',
      target: { type: 'consent', id: purpose },
      attrs: { ...a.audit.attrs, terms_version: rows[0].terms_version },
      ts: at,
    },
  ]);
  return view(rows[0]);
}

/** Defence in depth behind the edge's check_consent: core refuses too when no live consent exists. */
export async function requireConsent(
  q: Queryable,
  tenantId: string,
  customerId: string,
  purpose: string,
): Promise<void> {
  const { rows } = await q.query(
    'SELECT 1 FROM customer_consents WHERE tenant_id = $1 AND customer_id = $2 AND purpose = $3 AND withdrawn_at IS NULL',
    [tenantId, customerId, purpose],
  );
  if (rows.length === 0)
    throw new AppError('CUSTOMER_CONSENT_REQUIRED', 'no recorded consent for personalised offers');
}
