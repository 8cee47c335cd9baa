-- G3, G4, G7 (core/ledger/INVARIANTS.md): pending amounts are exactly the pending holds. A hold
-- starts pending and adds its amount to the debit account's pending_debits and the credit
-- account's pending_credits; it leaves pending once (captured, voided, expired), which takes
-- the amount back, and never returns; its accounts, currency and amount never change. A hold
-- whose currency is not both accounts' aborts (G5).
-- Proved by: test/ledger/routes.test.ts › "holds: …", "database refuses a second reversal, a
-- hold re-opened, resized or over-captured, a deleted hold and truncated entries".
CREATE OR REPLACE FUNCTION ledger_holds_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_sign integer := 0;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'pending' THEN
      RAISE EXCEPTION 'ledger: a hold starts pending' USING ERRCODE = 'LG004';
    END IF;
    v_sign := 1;
  ELSE
    IF (NEW.tenant_id, NEW.id, NEW.debit_account_id, NEW.credit_account_id, NEW.currency, NEW.amount)
       IS DISTINCT FROM (OLD.tenant_id, OLD.id, OLD.debit_account_id, OLD.credit_account_id, OLD.currency, OLD.amount)
       OR (OLD.status <> 'pending' AND NEW.status IS DISTINCT FROM OLD.status) THEN
      RAISE EXCEPTION 'ledger: hold % may only leave pending once', OLD.id USING ERRCODE = 'LG004';
    END IF;
    IF OLD.status = 'pending' AND NEW.status <> 'pending' THEN v_sign := -1; END IF;
  END IF;
  IF v_sign <> 0 THEN
    UPDATE ledger_balances SET pending_debits = pending_debits + v_sign * NEW.amount, version = version + 1
     WHERE tenant_id = NEW.tenant_id AND account_id = NEW.debit_account_id AND currency = NEW.currency;
    IF NOT FOUND THEN RAISE EXCEPTION 'ledger: hold currency is not the debit account''s' USING ERRCODE = 'LG003'; END IF;
    UPDATE ledger_balances SET pending_credits = pending_credits + v_sign * NEW.amount, version = version + 1
     WHERE tenant_id = NEW.tenant_id AND account_id = NEW.credit_account_id AND currency = NEW.currency;
    IF NOT FOUND THEN RAISE EXCEPTION 'ledger: hold currency is not the credit account''s' USING ERRCODE = 'LG003'; END IF;
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER ledger_holds_apply AFTER INSERT OR UPDATE ON ledger_holds
  FOR EACH ROW EXECUTE FUNCTION ledger_holds_apply();
