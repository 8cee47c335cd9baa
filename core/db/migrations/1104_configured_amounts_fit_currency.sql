-- Amounts configured in a currency and kept (a savings product's min_balance, an API key's daily
-- amount budget) are exact in the currency's minor units as admin_currencies has them when they
-- commit, whoever writes them (the core routes, a seed, an operator's SQL). A change of the minor
-- units (core/admin/countries/currencies.ts) locks the currency's row FOR UPDATE, then refuses
-- (409 CURRENCY_MINOR_UNITS_LOCKED) while a stored amount would not fit; these guards share the
-- row until their write commits, as a schedule's validation does (core/admin/schedules/write.ts
-- issuesOf), so the two cannot pass their checks beside each other: the change waits for the
-- write and then sees its amount, or the write waits for the change and reads what it left.
-- The savings products' guard is the ledger's (core/ledger/sql/savings_product_amount_guard.sql,
-- applied after the migrations); the API keys' is here.
-- SQLSTATE CU001 is answered 422 INVALID_AMOUNT, CU002 422 UNKNOWN_CURRENCY (shared/errors.ts
-- asAppError); the messages name the field, the amount and the currency, nothing else.
CREATE FUNCTION currency_amount_fits(p_currency text, p_amount numeric, p_field text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_minor integer;
BEGIN
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
CREATE FUNCTION api_key_budget_amount_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT (NEW.budget ? 'daily_amount') THEN RETURN NEW; END IF;
  IF TG_OP = 'UPDATE' AND OLD.budget IS NOT DISTINCT FROM NEW.budget THEN RETURN NEW; END IF;
  PERFORM currency_amount_fits(NEW.budget ->> 'currency', (NEW.budget ->> 'daily_amount')::numeric, 'budget.daily_amount');
  RETURN NEW;
END $$;
CREATE TRIGGER api_key_budget_amount_guard BEFORE INSERT OR UPDATE OF budget
  ON api_keys FOR EACH ROW EXECUTE FUNCTION api_key_budget_amount_guard();
