-- ledger_apply, second version: the lock set is collected command by command with primary-key
-- look-ups, and the rows are locked one by one in (tenant_id, account_id) order. The first
-- version's set-based query let the planner hash-join whole tables (entries grow without
-- bound), making every batch slower than the last.
CREATE OR REPLACE FUNCTION ledger_apply(p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  c jsonb;
  x jsonb;
  v_t text[] := '{}';
  v_a uuid[] := '{}';
  r record;
  v_out jsonb[] := '{}';
BEGIN
  FOR c IN SELECT value FROM jsonb_array_elements(p_cmds) LOOP
    CASE c->>'op'
      WHEN 'post' THEN
        FOR x IN SELECT value FROM jsonb_array_elements(c->'entries') LOOP
          v_t := v_t || (c->>'tenant'); v_a := v_a || (x->>'account_id')::uuid;
        END LOOP;
      WHEN 'hold' THEN
        v_t := v_t || (c->>'tenant') || (c->>'tenant');
        v_a := v_a || (c->>'debit_account_id')::uuid || (c->>'credit_account_id')::uuid;
      WHEN 'capture', 'void' THEN
        FOR r IN SELECT tenant_id, debit_account_id, credit_account_id FROM ledger_holds
                  WHERE tenant_id = c->>'tenant' AND id = (c->>'hold_id')::uuid LOOP
          v_t := v_t || r.tenant_id || r.tenant_id; v_a := v_a || r.debit_account_id || r.credit_account_id;
        END LOOP;
      WHEN 'reverse' THEN
        FOR r IN SELECT tenant_id, account_id FROM ledger_entries
                  WHERE tenant_id = c->>'tenant' AND posting_id = (c->>'posting_id')::uuid LOOP
          v_t := v_t || r.tenant_id; v_a := v_a || r.account_id;
        END LOOP;
      WHEN 'expire' THEN
        FOR x IN SELECT value FROM jsonb_array_elements(c->'holds') LOOP
          FOR r IN SELECT tenant_id, debit_account_id, credit_account_id FROM ledger_holds
                    WHERE tenant_id = x->>'tenant' AND id = (x->>'id')::uuid LOOP
            v_t := v_t || r.tenant_id || r.tenant_id; v_a := v_a || r.debit_account_id || r.credit_account_id;
          END LOOP;
        END LOOP;
      ELSE NULL;
    END CASE;
  END LOOP;
  -- One global order: concurrent batches (other processes, account close) never deadlock.
  FOR r IN SELECT DISTINCT k.t, k.a FROM unnest(v_t, v_a) AS k(t, a) ORDER BY k.t, k.a LOOP
    PERFORM 1 FROM ledger_balances WHERE tenant_id = r.t AND account_id = r.a FOR UPDATE;
  END LOOP;
  FOR c IN SELECT value FROM jsonb_array_elements(p_cmds) LOOP
    v_out := v_out || CASE c->>'op'
      WHEN 'post' THEN ledger_do_post(c)
      WHEN 'reverse' THEN ledger_do_reverse(c)
      WHEN 'hold' THEN ledger_do_hold(c)
      WHEN 'capture' THEN ledger_do_settle(c)
      WHEN 'void' THEN ledger_do_settle(c)
      WHEN 'expire' THEN ledger_do_expire(c)
      ELSE ledger_fail('INTERNAL', 'unknown ledger command') END;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

-- Inside the write path every statement touches a handful of rows by key; row estimates for
-- jsonb and transition tables are guesses, so hash and merge joins (which scan whole tables)
-- are switched off for the duration of the call, nested functions and triggers included.
ALTER FUNCTION ledger_apply(jsonb) SET enable_hashjoin = off;
ALTER FUNCTION ledger_apply(jsonb) SET enable_mergejoin = off;
ALTER FUNCTION ledger_apply(jsonb) SET enable_seqscan = off;

-- Checks 4–7 with one primary-key look-up per leg: the set-based first version could scan a
-- tenant's whole balance table when statistics were stale (bulk loads, new tenants).
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

-- The entries trigger, same guarantees (G1, G3, G5), with key look-ups instead of joins.
CREATE OR REPLACE FUNCTION ledger_entries_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_count smallint;
BEGIN
  FOR r IN SELECT tenant_id, posting_id, count(*) AS n, max(leg) AS mx FROM new_entries GROUP BY 1, 2 LOOP
    SELECT entry_count INTO v_count FROM ledger_postings WHERE tenant_id = r.tenant_id AND id = r.posting_id;
    IF v_count IS NULL OR r.n <> v_count OR r.mx <> v_count THEN
      RAISE EXCEPTION 'ledger: posting % did not arrive with all its legs in one statement', r.posting_id USING ERRCODE = 'LG001';
    END IF;
  END LOOP;
  FOR r IN SELECT posting_id, currency FROM new_entries GROUP BY tenant_id, posting_id, currency
           HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0 LOOP
    RAISE EXCEPTION 'ledger: posting % does not balance in %', r.posting_id, r.currency USING ERRCODE = 'LG001';
  END LOOP;
  FOR r IN SELECT tenant_id, account_id, currency,
                  coalesce(sum(amount) FILTER (WHERE side = 'debit'), 0) AS d,
                  coalesce(sum(amount) FILTER (WHERE side = 'credit'), 0) AS c
             FROM new_entries GROUP BY 1, 2, 3 ORDER BY 1, 2 LOOP
    UPDATE ledger_balances SET debits_posted = debits_posted + r.d, credits_posted = credits_posted + r.c, version = version + 1
     WHERE tenant_id = r.tenant_id AND account_id = r.account_id AND currency = r.currency;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'ledger: an entry''s currency is not its account''s currency' USING ERRCODE = 'LG003';
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
