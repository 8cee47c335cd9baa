-- Issue 20 item 3 (SPEC 2.7 `payer`): a payer tuple whose `expires_at` caveat passes is never
-- deleted, so core/payments/lapsed-payers.ts sweeps for pending transfers a delegate made from
-- another customer's wallet whose tuple has lapsed, and releases their holds. The sweep reads
-- only pending delegated transfers: this partial index holds just those rows (a transfer leaves
-- it when it posts, fails or expires), so the sweep never scans the transfers table.
CREATE INDEX transfers_delegated_pending_idx ON transfers (expires_at)
  WHERE status = 'PENDING' AND initiator_customer_id <> payer_customer_id;
