-- A savings product's min_balance is exact in its currency's minor units as admin_currencies has
-- them when it commits, whoever writes it (the routes, a seed, an operator's SQL): the check and
-- its lock on the currency's row are migration 1104's currency_amount_fits, shared with the API
-- keys' budgets; a change of the minor units waits for this write or this write for it.
-- Proved by: test/admin/currency-rescale-races.test.ts, test/e2e/attack-currencies.test.ts.
CREATE OR REPLACE FUNCTION savings_product_amount_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM currency_amount_fits(NEW.currency, NEW.min_balance, 'min_balance');
  RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER savings_product_amount_guard BEFORE INSERT OR UPDATE OF currency, min_balance
  ON ledger_savings_products FOR EACH ROW EXECUTE FUNCTION savings_product_amount_guard();
