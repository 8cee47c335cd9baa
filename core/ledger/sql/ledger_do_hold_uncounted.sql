-- A hold (G4, G7): checks 9–13 on its two legs (the debit account must have the amount
-- available, counting its other holds), then a PENDING domain transaction and the hold row; the
-- holds trigger reserves the amount on the debit account (pending_debits) and announces it on
-- the credit account (pending_credits); hold.created in the outbox (G10). ledger_do_hold wraps
-- it to remember a hold an API key's budget already counted (G12).
-- Proved by: test/ledger/routes.test.ts › "holds: create, partial capture, void, capture voided
-- 409, over-capture 422, expiry".
CREATE OR REPLACE FUNCTION ledger_do_hold_uncounted(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text := c->>'tenant';
  v_id uuid := (c->>'id')::uuid;
  v_fail jsonb;
BEGIN
  v_fail := coalesce(ledger_type_missing(v_tenant, c->>'type'), ledger_check_legs(v_tenant, jsonb_build_array(
    jsonb_build_object('account_id', c->>'debit_account_id', 'side', 'debit', 'amount', c->>'amount', 'currency', c->>'currency'),
    jsonb_build_object('account_id', c->>'credit_account_id', 'side', 'credit', 'amount', c->>'amount', 'currency', c->>'currency'))));
  IF v_fail IS NOT NULL THEN RETURN v_fail; END IF;
  PERFORM ledger_new_transaction(v_tenant, (c->>'transaction_id')::uuid, c->>'type', 'PENDING');
  INSERT INTO ledger_holds (tenant_id, id, transaction_id, debit_account_id, credit_account_id, currency, amount, status, description, metadata, expires_at)
  VALUES (v_tenant, v_id, (c->>'transaction_id')::uuid, (c->>'debit_account_id')::uuid, (c->>'credit_account_id')::uuid,
          c->>'currency', (c->>'amount')::numeric, 'pending', c->>'description', coalesce(c->'metadata', '{}'::jsonb), (c->>'expires_at')::timestamptz);
  INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload)
  VALUES (uuidv7(), v_tenant, 'hold', v_id::text, 'hold.created', ledger_hold_json(v_tenant, v_id));
  RETURN jsonb_build_object('ok', true, 'hold', ledger_hold_json(v_tenant, v_id));
END $$;
