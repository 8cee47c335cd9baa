-- Ledger guarantees enforced by the database itself (core/ledger/INVARIANTS.md G1–G6). The
-- ledger's own checks answer clean result codes first; these triggers and constraints are the
-- backstop that makes a bug abort the transaction instead of committing a broken ledger.

-- G2: postings, entries and transaction history are append-only.
CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger: % is append-only (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'LG002';
END $$;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_postings_no_truncate BEFORE TRUNCATE ON ledger_postings
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_history_append_only BEFORE UPDATE OR DELETE ON ledger_transaction_history
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_holds_no_delete BEFORE DELETE ON ledger_holds
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_overdraft_no_delete BEFORE DELETE ON ledger_overdraft_lines
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_balances_no_delete BEFORE DELETE ON ledger_balances
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

-- G1, G3, G5: every posting arrives with all its legs in one INSERT and balances per
-- currency; each entry's currency is its account's; the balance rows absorb the entries in
-- the same statement (so a balance equals the sum of its entries at every commit).
CREATE FUNCTION ledger_entries_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_bad record;
  v_expected integer;
  v_updated integer;
BEGIN
  SELECT s.posting_id INTO v_bad
    FROM (SELECT tenant_id, posting_id, count(*) AS n, max(leg) AS mx FROM new_entries GROUP BY 1, 2) s
    LEFT JOIN ledger_postings p ON p.tenant_id = s.tenant_id AND p.id = s.posting_id
   WHERE p.id IS NULL OR s.n <> p.entry_count OR s.mx <> p.entry_count
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'ledger: posting % did not arrive with all its legs in one statement', v_bad.posting_id USING ERRCODE = 'LG001';
  END IF;
  SELECT posting_id, currency INTO v_bad FROM new_entries GROUP BY tenant_id, posting_id, currency
  HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0 LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'ledger: posting % does not balance in %', v_bad.posting_id, v_bad.currency USING ERRCODE = 'LG001';
  END IF;
  WITH agg AS (
    SELECT tenant_id, account_id, currency,
           coalesce(sum(amount) FILTER (WHERE side = 'debit'), 0) AS d,
           coalesce(sum(amount) FILTER (WHERE side = 'credit'), 0) AS c
      FROM new_entries GROUP BY 1, 2, 3)
  UPDATE ledger_balances b
     SET debits_posted = b.debits_posted + agg.d, credits_posted = b.credits_posted + agg.c, version = b.version + 1
    FROM agg
   WHERE b.tenant_id = agg.tenant_id AND b.account_id = agg.account_id AND b.currency = agg.currency;
  GET DIAGNOSTICS v_updated = ROW_COUNT;
  SELECT count(*) INTO v_expected FROM (SELECT DISTINCT tenant_id, account_id, currency FROM new_entries) x;
  IF v_updated <> v_expected THEN
    RAISE EXCEPTION 'ledger: an entry''s currency is not its account''s currency' USING ERRCODE = 'LG003';
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER ledger_entries_apply AFTER INSERT ON ledger_entries
  REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_apply();

-- G3/G4: pending amounts are exactly the pending holds. A hold's money fields never change;
-- it leaves `pending` once and never returns.
CREATE FUNCTION ledger_holds_apply() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER ledger_holds_apply AFTER INSERT OR UPDATE ON ledger_holds
  FOR EACH ROW EXECUTE FUNCTION ledger_holds_apply();

-- An account's overdraft limit is exactly its active overdraft line.
CREATE FUNCTION ledger_overdraft_apply() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER ledger_overdraft_apply AFTER INSERT OR UPDATE ON ledger_overdraft_lines
  FOR EACH ROW EXECUTE FUNCTION ledger_overdraft_apply();

-- Balance rows start at zero and change only from the triggers above (depth ≥ 2): a direct
-- UPDATE of an amount is refused, so no code path can move a balance without an entry.
CREATE FUNCTION ledger_balances_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER ledger_balances_guard BEFORE INSERT OR UPDATE ON ledger_balances
  FOR EACH ROW EXECUTE FUNCTION ledger_balances_guard();
