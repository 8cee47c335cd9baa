-- A domain transaction starts with its first history row (from nothing to p_status), in the same
-- statement group as the transaction itself: the history is complete from the start (G2).
-- Proved by: test/ledger/sql-files.test.ts › "a hold's transaction keeps its history: PENDING, then
-- POSTED by the capture; a posting's starts POSTED".
CREATE OR REPLACE FUNCTION ledger_new_transaction(p_tenant text, p_id uuid, p_type text, p_status text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO ledger_transactions (tenant_id, id, type_code, status) VALUES (p_tenant, p_id, p_type, p_status);
  INSERT INTO ledger_transaction_history (tenant_id, transaction_id, from_status, to_status) VALUES (p_tenant, p_id, NULL, p_status);
$$;
