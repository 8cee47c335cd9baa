-- G3, G4 (core/ledger/INVARIANTS.md): an account's overdraft_limit is exactly its active
-- overdraft line. A line is opened active (adds its limit) and later closed (takes it back);
-- it is never edited or re-opened.
-- Proved by: test/ledger/routes.test.ts › "overdraft line: …".
CREATE OR REPLACE FUNCTION ledger_overdraft_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_delta numeric := 0;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.status = 'active' THEN v_delta := NEW.limit_amount; END IF;
  ELSE
    IF (NEW.tenant_id, NEW.id, NEW.account_id, NEW.limit_amount) IS DISTINCT FROM (OLD.tenant_id, OLD.id, OLD.account_id, OLD.limit_amount)
       OR (OLD.status = 'closed' AND NEW.status <> 'closed') THEN
      RAISE EXCEPTION 'ledger: overdraft lines are closed, never edited' USING ERRCODE = 'LG004';
    END IF;
    IF OLD.status = 'active' AND NEW.status = 'closed' THEN v_delta := -OLD.limit_amount; END IF;
  END IF;
  IF v_delta <> 0 THEN
    UPDATE ledger_balances SET overdraft_limit = overdraft_limit + v_delta, version = version + 1
     WHERE tenant_id = NEW.tenant_id AND account_id = NEW.account_id;
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER ledger_overdraft_apply AFTER INSERT OR UPDATE ON ledger_overdraft_lines
  FOR EACH ROW EXECUTE FUNCTION ledger_overdraft_apply();
