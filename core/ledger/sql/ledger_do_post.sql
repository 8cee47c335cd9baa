-- The `post` command inside a mixed batch (ledger_apply_each): checks 9–13 of INVARIANTS.md
-- "Result codes" (ledger_type_missing, ledger_check_legs), then a new POSTED domain transaction
-- and the posting (ledger_write_posting). Must give the same results, rows and events as
-- ledger_post_batch, the set-based path for batches made only of postings.
-- Proved by: test/ledger/batch.test.ts › "gives the same results, messages, rows and balances as
-- the command-by-command path".
CREATE OR REPLACE FUNCTION ledger_do_post(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text := c->>'tenant';
  v_fail jsonb;
BEGIN
  v_fail := coalesce(ledger_type_missing(v_tenant, c->>'type'), ledger_check_legs(v_tenant, c->'entries'));
  IF v_fail IS NOT NULL THEN RETURN v_fail; END IF;
  PERFORM ledger_new_transaction(v_tenant, (c->>'transaction_id')::uuid, c->>'type', 'POSTED');
  PERFORM ledger_write_posting(v_tenant, (c->>'id')::uuid, (c->>'transaction_id')::uuid, c->>'type', 'posting',
    c->>'currency', c->'entries', c->>'description', c->'metadata', NULL, NULL);
  RETURN jsonb_build_object('ok', true, 'created_at', ledger_ts(now()));
END $$;
