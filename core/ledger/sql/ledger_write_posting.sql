-- One posting written (ledger_do_post, reversals, captures): the header, then every leg in one
-- INSERT, so the entries statement trigger checks the posting complete and balanced and applies
-- it to the balance rows (G1, G3, G5); the posting.created event in the outbox in the same
-- transaction (G10).
-- Proved by: test/ledger/routes.test.ts › "multi-leg and multi-currency postings; GET posting;
-- outbox and audit in the same transaction", "reversal: inverse entries, …", "holds: create,
-- partial capture, …".
CREATE OR REPLACE FUNCTION ledger_write_posting(p_tenant text, p_id uuid, p_txn uuid, p_type text, p_kind text, p_currency text,
  p_entries jsonb, p_description text, p_metadata jsonb, p_reverses uuid, p_hold uuid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ledger_postings (tenant_id, id, transaction_id, type_code, kind, currency, entry_count, description, metadata, reverses_posting_id, hold_id)
  VALUES (p_tenant, p_id, p_txn, p_type, p_kind, p_currency, jsonb_array_length(p_entries), p_description, coalesce(p_metadata, '{}'::jsonb), p_reverses, p_hold);
  INSERT INTO ledger_entries (tenant_id, posting_id, leg, account_id, side, amount, currency)
  SELECT p_tenant, p_id, ord, (e->>'account_id')::uuid, e->>'side', (e->>'amount')::numeric, e->>'currency'
    FROM jsonb_array_elements(p_entries) WITH ORDINALITY x(e, ord);
  INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload)
  VALUES (uuidv7(), p_tenant, 'posting', p_id::text, 'posting.created', jsonb_build_object(
    'id', p_id, 'transaction_id', p_txn, 'kind', p_kind, 'type', p_type, 'currency', p_currency,
    'entries', p_entries, 'reverses_posting_id', p_reverses, 'hold_id', p_hold));
END $$;
