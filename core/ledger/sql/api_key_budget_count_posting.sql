-- G12, for ledger_do_counted: count the debit legs of posting p_posting against key p_key's daily
-- amount budget (SPEC 5.4.5) in the key's day row, the same row the edge counts postings and
-- holds in, so together they never pass the budget. NULL when counted (or the key has no amount
-- budget); otherwise the refusal as a ledger result: BUDGET_EXCEEDED past the budget (or an
-- unknown key), POLICY_DENIED for a leg in another currency than the budget's (as at the edge) and
-- for a budget stored before migrations 1104 and 1112 refused what is no amount (the edge refuses
-- such a key's money movements too, edge/auth/budget.ts `budget_unreadable`; here the cast failed
-- and blamed the request).
-- Proved by: test/e2e/apikey-budgets.test.ts › "counts reversals and captures within the budget,
-- in the same record as the edge counts postings"; test/ledger/money-routes.test.ts › "a capture
-- in another currency than the key budget is refused as at the edge, and moves nothing".
CREATE OR REPLACE FUNCTION api_key_budget_count_posting(p_tenant text, p_posting uuid, p_key text, p_window timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  b jsonb;
  v_currency text;
  v_other boolean;
  v_micros bigint;
  v_limit numeric;
BEGIN
  SELECT budget INTO b FROM api_keys WHERE tenant_id = p_tenant AND id = p_key;
  IF NOT FOUND THEN RETURN ledger_fail('BUDGET_EXCEEDED', 'API key budget exceeded (unknown key)'); END IF;
  -- A budget that is no JSON object (a string encoded twice, an array wrapping it, null) or whose
  -- daily_amount is JSON null is one no one can read (refused below), not no budget.
  IF jsonb_typeof(b) = 'object' AND NOT (b ? 'daily_amount') THEN RETURN NULL; END IF;
  v_currency := b->>'currency';
  -- At most 9e12 (its micro-units fit a bigint); NaN is greater than every number.
  IF jsonb_typeof(b) = 'object' AND pg_input_is_valid(b->>'daily_amount', 'numeric') THEN v_limit := (b->>'daily_amount')::numeric; END IF;
  IF v_limit IS NULL OR NOT (v_limit >= 0 AND v_limit <= 9e12) THEN
    RETURN ledger_fail('POLICY_DENIED', 'API key budget cannot count this request (budget_unreadable)');
  END IF;
  SELECT bool_or(currency IS DISTINCT FROM v_currency), (coalesce(sum(amount) FILTER (WHERE side = 'debit'), 0) * 1000000)::bigint
    INTO v_other, v_micros
    FROM ledger_entries WHERE tenant_id = p_tenant AND posting_id = p_posting;
  IF v_other THEN
    RETURN ledger_fail('POLICY_DENIED', format('API key budget cannot count this request (currency_mismatch): the budget is in %s', v_currency));
  END IF;
  IF NOT api_key_budget_take(p_key, p_window, v_currency, v_micros, (v_limit * 1000000)::bigint) THEN
    RETURN ledger_fail('BUDGET_EXCEEDED', 'API key budget exceeded (daily_amount)');
  END IF;
  RETURN NULL;
END $$;
