-- G11: the accounts a ledger command takes money from, which a fraud hold blocks: a posting's
-- accounts whose net over its legs is a debit, a new hold's debit account. Captures, voids,
-- expiries and reversals settle or undo what was already authorised and name none.
-- Proved by: test/e2e/staff-purposes.test.ts › "a fraud hold refuses a transfer out and a
-- cash-out debit, lets a transfer in arrive, …".
CREATE OR REPLACE FUNCTION ledger_debited_accounts(c jsonb) RETURNS TABLE (account_id uuid) LANGUAGE sql IMMUTABLE AS $$
  SELECT (e->>'account_id')::uuid FROM jsonb_array_elements(CASE WHEN c->>'op' = 'post' THEN c->'entries' ELSE '[]'::jsonb END) e
   GROUP BY 1 HAVING sum(CASE e->>'side' WHEN 'credit' THEN (e->>'amount')::numeric ELSE -(e->>'amount')::numeric END) < 0
  UNION ALL
  SELECT (c->>'debit_account_id')::uuid WHERE c->>'op' = 'hold'
$$;
