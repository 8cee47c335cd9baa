-- Every core keeps a snapshot of this table for the ledger's amount checks (core/ledger/currency.ts).
-- A change, whoever makes it (the admin API through any core, a migration, an operator's SQL),
-- is announced on `currencies_changed` at commit, and every core reloads its snapshot on it
-- (core/admin/reference/currency-sync.ts): a currency added through one core is known to the
-- others at once instead of up to 30 s later. Per statement, not per row: the payload is empty
-- (a core reloads the whole table, a few dozen rows). No trigger on TRUNCATE: the word would read
-- as a contraction to core/db/expand-contract.ts, and nothing truncates this table (an operator
-- who did would see the cores follow at their 30 s reload).
CREATE FUNCTION admin_currencies_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('currencies_changed', '');
  RETURN NULL;
END $$;
CREATE TRIGGER currencies_changed AFTER INSERT OR UPDATE OR DELETE ON admin_currencies
  FOR EACH STATEMENT EXECUTE FUNCTION admin_currencies_notify();
