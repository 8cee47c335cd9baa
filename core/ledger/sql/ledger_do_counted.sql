-- G12: a reversal or capture made with an API key (the command carries `budget` {key_id,
-- window_start}) counts the money it moved against the key's daily amount budget, in the same
-- transaction that moves it. The movement and its count run in one subtransaction: a refusal
-- (POLICY_DENIED for a leg outside the budget's currency, BUDGET_EXCEEDED past it) undoes the
-- movement and nothing else in the batch, and the command answers it like any other ledger
-- failure. A capture of a hold the same key created is not counted again (the edge counted the
-- hold). A void moves nothing and is never counted.
-- Proved by: test/e2e/apikey-budgets.test.ts › "two parallel captures that each fit but together
-- exceed: exactly one succeeds", "a hold the key created is counted once, …";
-- test/ledger/money-routes.test.ts › "a capture in another currency than the key budget is
-- refused as at the edge, and moves nothing".
CREATE OR REPLACE FUNCTION ledger_do_counted(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v jsonb;
  v_refused jsonb;
  k text := c->'budget'->>'key_id';
BEGIN
  IF k IS NULL THEN
    RETURN CASE c->>'op' WHEN 'reverse' THEN ledger_do_reverse_uncounted(c) ELSE ledger_do_settle_uncounted(c) END;
  END IF;
  BEGIN
    v := CASE c->>'op' WHEN 'reverse' THEN ledger_do_reverse_uncounted(c) ELSE ledger_do_settle_uncounted(c) END;
    IF (v->>'ok')::boolean AND c->>'op' IN ('reverse', 'capture')
       AND NOT (c->>'op' = 'capture' AND EXISTS (SELECT 1 FROM api_key_counted_holds
                 WHERE tenant_id = c->>'tenant' AND hold_id = (c->>'hold_id')::uuid AND key_id = k)) THEN
      v_refused := api_key_budget_count_posting(c->>'tenant', (c->>'id')::uuid, k, (c->'budget'->>'window_start')::timestamptz);
      IF v_refused IS NOT NULL THEN RAISE EXCEPTION USING ERRCODE = 'PB001', MESSAGE = v_refused::text; END IF;
    END IF;
    RETURN v;
  EXCEPTION WHEN SQLSTATE 'PB001' THEN
    RETURN SQLERRM::jsonb;
  END;
END $$;
