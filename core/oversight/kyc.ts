/**
 * compliance.kyc (issue 20 item 4; registry `log_consent`): a compliance officer reads a
 * customer's KYC record, and every access records the reason the officer stated
 * (X-Access-Reason, required) in the audit log with the officer's name and the decision.
 */
import { Type } from '@sinclair/typebox';
import { appendAudit } from '../../shared/audit.ts';
import type { TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import { auditOf, type StaffCaller } from './context.ts';

export const reasonHeader = {
  name: 'X-Access-Reason',
  required: false,
  description:
    'Required (400 ACCESS_REASON_REQUIRED without it): why the officer opens this record (10–300 characters); recorded in the audit log',
};
export const KycParams = Type.Object({
  customerId: Type.String({
    pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$',
  }),
});
export const KycRecord = Type.Object({
  customer_id: Type.String(),
  phone: Type.String(),
  level: Type.Integer(),
  status: Type.String(),
  full_name: Type.String(),
  id_type: Type.String(),
  id_number: Type.String(),
  date_of_birth: Type.String(),
  screening: Type.Unknown(),
  expires_at: Type.String(),
  created_at: Type.String(),
  updated_at: Type.String(),
  documents: Type.Array(
    Type.Object({ id: Type.String(), kind: Type.String(), sha256: Type.String(), created_at: Type.String() }),
  ),
});

/** The stated reason, trimmed; refused when missing or too short to mean anything. */
export function accessReason(headers: Readonly<Record<string, string>>): string {
  const reason = (headers['x-access-reason'] ?? '').trim();
  if (reason.length < 10 || reason.length > 300)
    throw new AppError(
      'ACCESS_REASON_REQUIRED',
      'state why you open this record in X-Access-Reason (10–300 characters)',
    );
  return reason;
}

interface Row {
  phone_e164: string;
  level: number;
  status: string;
  full_name: string;
  id_type: string;
  id_number: string;
  date_of_birth: Date;
  screening: unknown;
  expires_at: Date;
  created_at: Date;
  updated_at: Date;
}

export async function readKyc(
  q: TxClient,
  ctx: RequestContext<unknown, unknown, unknown>,
  c: StaffCaller,
  customerId: string,
  reason: string,
  now: number,
) {
  const { rows } = await q.query<Row>(
    `SELECT c.phone_e164, k.level, k.status, k.full_name, k.id_type, k.id_number, k.date_of_birth, k.screening, k.expires_at, k.created_at, k.updated_at
       FROM kyc_profiles k JOIN customers c ON c.tenant_id = k.tenant_id AND c.id = k.customer_id
      WHERE k.tenant_id = $1 AND k.customer_id = $2`,
    [c.tenantId, customerId],
  );
  const k = rows[0];
  if (!k) throw new AppError('CUSTOMER_NOT_FOUND', 'no KYC record for that customer in this tenant');
  const { rows: docs } = await q.query<{ id: string; kind: string; sha256: string; created_at: Date }>(
    'SELECT id, kind, sha256, created_at FROM kyc_documents WHERE tenant_id = $1 AND customer_id = $2 ORDER BY created_at, id',
    [c.tenantId, customerId],
  );
  const a = auditOf(ctx, c);
  await appendAudit(q, [
    {
      tenantId: c.tenantId,
      ...a,
      // The registry's action for this route (the full record), not the agents' status read.
      action: 'kyc.review',
      target: { type: 'kyc_customer', id: customerId },
      attrs: { ...a.attrs, reason },
      ts: new Date(now),
    },
  ]);
  return {
    customer_id: customerId,
    phone: k.phone_e164,
    level: k.level,
    status: k.status,
    full_name: k.full_name,
    id_type: k.id_type,
    id_number: k.id_number,
    date_of_birth: k.date_of_birth.toISOString().slice(0, 10),
    screening: k.screening,
    expires_at: k.expires_at.toISOString(),
    created_at: k.created_at.toISOString(),
    updated_at: k.updated_at.toISOString(),
    documents: docs.map((d) => ({
      id: d.id,
      kind: d.kind,
      sha256: d.sha256,
      created_at: d.created_at.toISOString(),
    })),
  };
}
