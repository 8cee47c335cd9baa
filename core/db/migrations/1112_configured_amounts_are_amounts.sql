-- Migration 1104's guards checked that a configured amount fits its currency's minor units, not
-- that it is an amount. Through an operator's SQL they stored:
-- - a savings product's min_balance of NaN (numeric(20,6) takes it, and NaN >= 0): every read of
--   that tenant's savings products then failed (500);
-- - an API key's daily_amount as a JSON number, null, 'NaN', 'Infinity', '-5', ' 5 ' or '1e3':
--   nothing the edge reads as an amount (shared/money.ts parseAmount, edge/auth/budget.ts), so
--   the key moved money without its daily budget being applied at all.
-- Each is now refused as a misfit is (CU001, 422 INVALID_AMOUNT): an amount is finite and not
-- negative, and a daily_amount is a JSON string in the API's form (core/apikeys/routes.ts
-- Decimal), the only form every reader of a budget takes. A daily_amount without its currency is
-- CU002 (422 UNKNOWN_CURRENCY) and says so. The API never sent any of these. Rows stored before
-- stay as they are; a change of minor units reads past budgets that are no number
-- (core/admin/reference/configured-amounts.ts).
CREATE OR REPLACE FUNCTION currency_amount_fits(p_currency text, p_amount numeric, p_field text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_minor integer;
BEGIN
  IF p_amount IS NULL OR p_amount IN ('NaN', 'Infinity', '-Infinity') OR p_amount < 0 THEN
    RAISE EXCEPTION '%: % is not an amount', p_field, coalesce(p_amount::text, 'null') USING ERRCODE = 'CU001';
  END IF;
  SELECT minor_units INTO v_minor FROM admin_currencies WHERE code = p_currency FOR SHARE;
  IF NOT FOUND THEN
    -- The ledger accepts exactly this table's currencies (migration 0971).
    RAISE EXCEPTION 'currency % is not supported', p_currency USING ERRCODE = 'CU002';
  END IF;
  IF p_amount <> round(p_amount, v_minor) THEN
    RAISE EXCEPTION '%: % has more decimals than the % minor units of %', p_field, trim_scale(p_amount), v_minor, p_currency
      USING ERRCODE = 'CU001';
  END IF;
END $$;

-- A budget without daily_amount names no amount (per_minute alone, or nothing).
CREATE OR REPLACE FUNCTION api_key_budget_amount_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_amount jsonb := NEW.budget -> 'daily_amount';
BEGIN
  IF NOT (NEW.budget ? 'daily_amount') THEN RETURN NEW; END IF;
  IF TG_OP = 'UPDATE' AND OLD.budget IS NOT DISTINCT FROM NEW.budget THEN RETURN NEW; END IF;
  IF jsonb_typeof(v_amount) IS DISTINCT FROM 'string'
     OR NOT coalesce((v_amount #>> '{}') ~ '^(0|[1-9][0-9]{0,13})(\.[0-9]{1,6})?$', false) THEN
    RAISE EXCEPTION 'budget.daily_amount: must be a decimal string such as "12.50" (no sign, exponent or spaces)'
      USING ERRCODE = 'CU001';
  END IF;
  IF jsonb_typeof(NEW.budget -> 'currency') IS DISTINCT FROM 'string' THEN
    RAISE EXCEPTION 'budget.daily_amount needs budget.currency' USING ERRCODE = 'CU002';
  END IF;
  PERFORM currency_amount_fits(NEW.budget ->> 'currency', (v_amount #>> '{}')::numeric, 'budget.daily_amount');
  RETURN NEW;
END $$;
