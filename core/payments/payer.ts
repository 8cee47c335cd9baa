/**
 * Delegated payer (SPEC 2.7 `payer`, issue 20 item 3): a customer moves money out of another
 * customer's wallet only while a live tuple `customer:<initiator> payer customer:<owner>` of the
 * same tenant exists. The edge's policy checks it on every transfer request; core checks again
 * (defence in depth: a request reaching core without the edge, or a tuple deleted between
 * decision and commit). The caveats (`expires_at`, `hours`, `ip_ranges`) are judged by the
 * signed policy's own `delegated_payer` check, evaluated here on the tuples read inside the
 * transfer's transaction: one evaluator, the edge's, never a second copy in TypeScript.
 */
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { localHour } from '../../shared/local-hour.ts';
import type { PolicyStore } from '../../policy/runtime/store.ts';

export interface PayerRequest {
  tenantId: string;
  /** The customer making the request (the tuple's subject). */
  initiator: string;
  /** Whose wallet pays (the tuple's object). */
  owner: string;
  action: 'transfer.create' | 'transfer.confirm';
  /** The request's source address, for `ip_ranges` caveats. */
  ip: string;
  aal: number;
}

/** Refuses (403 PAYER_NOT_AUTHORIZED) a transfer from a wallet the caller may not pay from. */
export type PayerGate = (q: Queryable, r: PayerRequest, nowMs: number) => Promise<void>;

/** The same answer whether the customer is unknown, another tenant's, or simply not delegated. */
const refused = () =>
  new AppError(
    'PAYER_NOT_AUTHORIZED',
    "you may not pay from that customer's wallet: no live payer relationship names you",
  );

interface TupleRow {
  relation: string;
  object_ns: string;
  object_id: string;
  caveat: Record<string, unknown>;
}

/** The gate over the policy revisions this core verified (fails closed without one). */
export function payerGate(policies: PolicyStore | undefined): PayerGate {
  return async (q, r, nowMs) => {
    // Locked FOR SHARE: a DELETE through the tuples API waits for this transfer to commit, and
    // the next transfer reads the tuple gone (never a revocation that lands mid-transfer unseen).
    const { rows: tuples } = await q.query<TupleRow>(
      `SELECT t.relation, t.object_ns, t.object_id, t.caveat FROM relationship_tuples t
         JOIN customers c ON c.tenant_id = t.tenant_id AND c.id::text = t.object_id
        WHERE t.tenant_id = $1 AND t.subject_ns = 'customer' AND t.subject_id = $2
          AND t.relation = 'payer' AND t.object_ns = 'customer' AND t.object_id = $3
        FOR SHARE OF t`,
      [r.tenantId, r.initiator, r.owner],
    );
    if (tuples.length === 0) throw refused();
    const policy = policies?.current;
    if (!policy)
      throw new AppError('POLICY_UNAVAILABLE', 'no policy bundle is loaded to judge the delegation');
    const { rows } = await q.query<{ tz: string | null }>(
      `SELECT security->>'timezone' AS tz FROM tenants WHERE id = $1`,
      [r.tenantId],
    );
    const input = {
      tenant: { id: r.tenantId },
      subject: { id: r.initiator, type: 'customer', aal: r.aal, tuples },
      resource: { type: 'transaction', tenant_id: r.tenantId, attrs: { payer_for: r.owner } },
      action: r.action,
      purpose: 'customer.transact',
      context: { ip: r.ip, risk: 'low', now_ns: nowMs * 1e6, local_hour: localHour(nowMs, rows[0]?.tz) },
    };
    let ok: boolean;
    try {
      // Only this check is core's to repeat; the rest of the decision (membership, risk,
      // step-up) is the edge's, and core enforces the step-up itself (transfers.ts).
      ok = policy.evaluate(input).reasons.some((c) => c.check === 'delegated_payer' && c.ok);
    } catch {
      throw new AppError('POLICY_UNAVAILABLE', 'the policy could not judge the delegation');
    }
    if (!ok) throw refused();
  };
}
