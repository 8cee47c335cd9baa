-- Checks 10–13 of INVARIANTS.md "Result codes" for the legs of one hold or reversal (postings are
-- checked by ledger_post_batch, set-based, with the same codes and messages): NULL when they
-- pass. ACCOUNT_NOT_FOUND is checked for every leg before ACCOUNT_CLOSED, and that before
-- CURRENCY_MISMATCH, each naming the first failing leg in leg order; INSUFFICIENT_FUNDS (G4)
-- when an account whose type keeps it at or above its line would end below it, counting its
-- pending holds. One primary-key look-up per leg (a set-based version could scan a tenant's
-- whole balance table when statistics were stale); the caller holds the balance row locks.
-- Proved by: test/ledger/routes.test.ts › "reversal: inverse entries, at most once, not of a
-- reversal, not into negative", "holds: create, partial capture, void, …".
CREATE OR REPLACE FUNCTION ledger_check_legs(p_tenant text, p_entries jsonb) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  r record;
  a record;
  b record;
  v_missing uuid;
  v_closed uuid;
  v_mismatch uuid;
BEGIN
  FOR r IN SELECT (e->>'account_id')::uuid AS account_id, e->>'currency' AS currency
             FROM jsonb_array_elements(p_entries) WITH ORDINALITY x(e, ord) ORDER BY ord LOOP
    SELECT status, currency INTO a FROM ledger_accounts WHERE tenant_id = p_tenant AND id = r.account_id;
    IF NOT FOUND THEN v_missing := coalesce(v_missing, r.account_id);
    ELSIF a.status <> 'active' THEN v_closed := coalesce(v_closed, r.account_id);
    ELSIF a.currency <> r.currency THEN v_mismatch := coalesce(v_mismatch, r.account_id);
    END IF;
  END LOOP;
  IF v_missing IS NOT NULL THEN RETURN ledger_fail('ACCOUNT_NOT_FOUND', format('account %s not found', v_missing)); END IF;
  IF v_closed IS NOT NULL THEN RETURN ledger_fail('ACCOUNT_CLOSED', format('account %s is closed', v_closed)); END IF;
  IF v_mismatch IS NOT NULL THEN
    RETURN ledger_fail('CURRENCY_MISMATCH', format('account %s does not hold the entry''s currency', v_mismatch));
  END IF;
  FOR r IN SELECT (e->>'account_id')::uuid AS account_id,
                  sum(CASE e->>'side' WHEN 'credit' THEN (e->>'amount')::numeric ELSE -(e->>'amount')::numeric END) AS net
             FROM jsonb_array_elements(p_entries) e GROUP BY 1 LOOP
    CONTINUE WHEN r.net >= 0;
    SELECT debits_must_not_exceed_credits AS floor, credits_posted - debits_posted - pending_debits + overdraft_limit AS available
      INTO b FROM ledger_balances WHERE tenant_id = p_tenant AND account_id = r.account_id;
    IF b.floor AND b.available + r.net < 0 THEN
      RETURN ledger_fail('INSUFFICIENT_FUNDS', format('account %s has insufficient available funds', r.account_id));
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
