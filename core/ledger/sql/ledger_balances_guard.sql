-- G3 (core/ledger/INVARIANTS.md): a balance row starts at zero and its amounts change only from
-- the entries, holds and overdraft-line triggers (trigger depth ≥ 2): a direct UPDATE of an
-- amount is refused, so no code path can move a balance without an entry, a hold or a line.
-- Proved by: test/ledger/routes.test.ts › "database refuses edits of entries and direct balance
-- updates".
CREATE OR REPLACE FUNCTION ledger_balances_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.debits_posted <> 0 OR NEW.credits_posted <> 0 OR NEW.pending_debits <> 0 OR NEW.pending_credits <> 0 OR NEW.overdraft_limit <> 0 THEN
      RAISE EXCEPTION 'ledger: a balance starts at zero' USING ERRCODE = 'LG005';
    END IF;
  ELSIF pg_trigger_depth() < 2 AND (
      (NEW.tenant_id, NEW.account_id, NEW.currency, NEW.debits_posted, NEW.credits_posted, NEW.pending_debits,
       NEW.pending_credits, NEW.overdraft_limit, NEW.debits_must_not_exceed_credits)
      IS DISTINCT FROM
      (OLD.tenant_id, OLD.account_id, OLD.currency, OLD.debits_posted, OLD.credits_posted, OLD.pending_debits,
       OLD.pending_credits, OLD.overdraft_limit, OLD.debits_must_not_exceed_credits)) THEN
    RAISE EXCEPTION 'ledger: balances change only through entries, holds and overdraft lines' USING ERRCODE = 'LG005';
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER ledger_balances_guard BEFORE INSERT OR UPDATE ON ledger_balances
  FOR EACH ROW EXECUTE FUNCTION ledger_balances_guard();
