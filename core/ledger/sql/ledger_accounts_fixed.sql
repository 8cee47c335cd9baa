-- G9 (core/ledger/INVARIANTS.md): an account's tenant, id and currency never change, so an entry
-- that names it (through the entries trigger, not a foreign key, since 0106) can never come to
-- mean another tenant's account or another currency.
-- Proved by: test/ledger/sql-files.test.ts › "an account's tenant, id and currency never change".
CREATE OR REPLACE FUNCTION ledger_accounts_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.tenant_id, NEW.id, NEW.currency) IS DISTINCT FROM (OLD.tenant_id, OLD.id, OLD.currency) THEN
    RAISE EXCEPTION 'ledger: an account''s tenant, id and currency never change' USING ERRCODE = 'LG002';
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER ledger_accounts_fixed BEFORE UPDATE ON ledger_accounts
  FOR EACH ROW EXECUTE FUNCTION ledger_accounts_fixed();
