-- An API key's daily_amount is at most 9e12 (shared/api-key-budget.ts dailyBudgetMaxUnits): its
-- micro-units are counted in bigints (api_key_budget_take, migration 0730), and the ledger reads a
-- larger budget as no amount (api_key_budget_count_posting, budget_unreadable). Migration 1112's
-- guard took up to 14 integer digits, so a key the API stored with a budget of 99999999999999.99
-- had every posting answered 503 at the edge (its limit overflowed the bigint) and every capture
-- and reversal refused 403 by the ledger. Refused now as a misfit is (CU001, 422 INVALID_AMOUNT).
-- Rows stored before stay as they are; the edge and the ledger refuse their money movements.
-- A trigger of its own beside api_key_budget_amount_guard, which fires first (triggers fire in
-- name order) and has checked the form.
CREATE FUNCTION api_key_budget_bound_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.budget IS NOT DISTINCT FROM NEW.budget THEN RETURN NEW; END IF;
  IF jsonb_typeof(NEW.budget -> 'daily_amount') = 'string'
     AND (NEW.budget ->> 'daily_amount') ~ '^(0|[1-9][0-9]{0,13})(\.[0-9]{1,6})?$'
     AND (NEW.budget ->> 'daily_amount')::numeric > 9000000000000 THEN
    RAISE EXCEPTION 'budget.daily_amount: % is more than 9000000000000', NEW.budget ->> 'daily_amount'
      USING ERRCODE = 'CU001';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER api_key_budget_bound_guard BEFORE INSERT OR UPDATE OF budget
  ON api_keys FOR EACH ROW EXECUTE FUNCTION api_key_budget_bound_guard();
