-- G7: a hold leaves pending (captured, voided or expired) exactly once, with its domain
-- transaction following (POSTED when captured, FAILED otherwise) and its event in the outbox in
-- the same transaction (G10). The holds trigger releases the pending amounts.
-- Proved by: test/ledger/routes.test.ts › "holds: create, partial capture, void, capture voided
-- 409, over-capture 422, expiry".
CREATE OR REPLACE FUNCTION ledger_close_hold(h ledger_holds, p_status text, p_captured numeric, p_posting uuid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE ledger_holds SET status = p_status, captured_amount = p_captured, capture_posting_id = p_posting, updated_at = now()
   WHERE tenant_id = h.tenant_id AND id = h.id;
  PERFORM ledger_move_transaction(h.tenant_id, h.transaction_id, CASE p_status WHEN 'captured' THEN 'POSTED' ELSE 'FAILED' END, p_status);
  INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload)
  VALUES (uuidv7(), h.tenant_id, 'hold', h.id::text, 'hold.' || p_status, ledger_hold_json(h.tenant_id, h.id));
END $$;
