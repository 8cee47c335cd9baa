-- G2 (core/ledger/INVARIANTS.md): postings, entries and transaction history are append-only;
-- holds, overdraft lines, balances, accounts, fraud holds and consents are never deleted;
-- entries, postings, balances and accounts are never truncated. Any such statement aborts the
-- transaction with SQLSTATE LG002.
-- Proved by: test/ledger/routes.test.ts › "database refuses edits of entries and direct balance
-- updates", "database refuses a second reversal, a hold re-opened, resized or over-captured, a
-- deleted hold and truncated entries".
CREATE OR REPLACE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % is append-only (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'LG002';
END $$;

CREATE OR REPLACE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_postings_no_truncate BEFORE TRUNCATE ON ledger_postings
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_history_append_only BEFORE UPDATE OR DELETE ON ledger_transaction_history
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_holds_no_delete BEFORE DELETE ON ledger_holds
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_overdraft_no_delete BEFORE DELETE ON ledger_overdraft_lines
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_balances_no_delete BEFORE DELETE ON ledger_balances
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
-- Since 0106 (entries reference their posting and balance row through the entries trigger, not
-- foreign keys): the referenced balance rows and accounts cannot disappear either.
CREATE OR REPLACE TRIGGER ledger_balances_no_truncate BEFORE TRUNCATE ON ledger_balances
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_accounts_no_delete BEFORE DELETE ON ledger_accounts
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER ledger_accounts_no_truncate BEFORE TRUNCATE ON ledger_accounts
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
-- Since 0860: fraud holds and customers' consents keep their history the same way.
CREATE OR REPLACE TRIGGER wallet_fraud_holds_no_delete BEFORE DELETE ON wallet_fraud_holds
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE OR REPLACE TRIGGER customer_consents_no_delete BEFORE DELETE ON customer_consents
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
