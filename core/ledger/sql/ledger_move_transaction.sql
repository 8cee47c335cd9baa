-- A domain transaction changes status only with a history row saying from what, to what and why
-- (G2: the history is append-only, so every status a transaction had stays readable).
-- Proved by: test/ledger/sql-files.test.ts › "a hold's transaction keeps its history: PENDING, then
-- POSTED by the capture; a posting's starts POSTED".
CREATE OR REPLACE FUNCTION ledger_move_transaction(p_tenant text, p_id uuid, p_to text, p_reason text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO ledger_transaction_history (tenant_id, transaction_id, from_status, to_status, reason)
  SELECT tenant_id, id, status, p_to, p_reason FROM ledger_transactions WHERE tenant_id = p_tenant AND id = p_id;
  UPDATE ledger_transactions SET status = p_to, updated_at = now() WHERE tenant_id = p_tenant AND id = p_id;
$$;
