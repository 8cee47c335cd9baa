-- Entries reference their posting and their account through the entries statement trigger
-- instead of two foreign keys. The foreign keys ran one look-up and one row lock (FOR KEY
-- SHARE) per entry, i.e. 64 queries for a batch of 32 legs, about a fifth of the CPU of
-- applying a postings batch; the trigger already looks up every posting of the statement
-- (its legs must be complete: G1) and every (tenant, account, currency) balance row (each
-- entry must be absorbed by its account's balance row: G3, G5), once per statement.
-- What the foreign keys also gave, that a referenced row cannot disappear, is kept:
-- postings are append-only (UPDATE, DELETE and TRUNCATE refused since 0101); balance rows
-- cannot be deleted (0101) and now not truncated either, and they reference their account
-- by foreign key; accounts are closed, never deleted, and not truncated.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_tenant_id_posting_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_tenant_id_account_id_fkey;

CREATE TRIGGER ledger_balances_no_truncate BEFORE TRUNCATE ON ledger_balances
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_accounts_no_delete BEFORE DELETE ON ledger_accounts
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_accounts_no_truncate BEFORE TRUNCATE ON ledger_accounts
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
-- An account's identity (tenant, id, currency) never changes once it has a balance row.
CREATE FUNCTION ledger_accounts_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.tenant_id, NEW.id, NEW.currency) IS DISTINCT FROM (OLD.tenant_id, OLD.id, OLD.currency) THEN
    RAISE EXCEPTION 'ledger: an account''s tenant, id and currency never change' USING ERRCODE = 'LG002';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER ledger_accounts_fixed BEFORE UPDATE ON ledger_accounts
  FOR EACH ROW EXECUTE FUNCTION ledger_accounts_fixed();

-- G6 with a partial unique index: ordinary postings (reverses_posting_id NULL, which never
-- conflicted) no longer add an index entry each.
ALTER TABLE ledger_postings DROP CONSTRAINT ledger_postings_tenant_id_reverses_posting_id_key;
CREATE UNIQUE INDEX ledger_postings_reverses_idx ON ledger_postings (tenant_id, reverses_posting_id) WHERE reverses_posting_id IS NOT NULL;
