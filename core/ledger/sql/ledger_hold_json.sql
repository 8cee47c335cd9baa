-- A hold as the wire shows it (SPEC holds; core/ledger/hold-routes.ts reads it too), amounts as
-- numeric text, times by ledger_ts: the outbox event and the command's answer are the same text.
-- Proved by: test/ledger/routes.test.ts › "holds: create, partial capture, void, …".
CREATE OR REPLACE FUNCTION ledger_hold_json(p_tenant text, p_id uuid) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('id', id, 'transaction_id', transaction_id, 'status', status,
    'debit_account_id', debit_account_id, 'credit_account_id', credit_account_id, 'currency', currency,
    'amount', amount::text, 'captured_amount', captured_amount::text, 'capture_posting_id', capture_posting_id,
    'description', description, 'metadata', metadata, 'expires_at', ledger_ts(expires_at),
    'created_at', ledger_ts(created_at), 'updated_at', ledger_ts(updated_at))
    FROM ledger_holds WHERE tenant_id = p_tenant AND id = p_id
$$;
