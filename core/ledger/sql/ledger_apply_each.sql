-- The command-by-command path of ledger_apply, for a batch that holds anything but postings
-- (holds, captures, voids, reversals, expiries): first every balance row any command may touch
-- is locked, in one global order (tenant_id, account_id), so concurrent batches (other
-- processes, account close) never deadlock; then the commands run in arrival order, each
-- answering its result (a refusal has no side effects). A `post` runs as a batch of one through
-- ledger_post_batch, the one posting implementation.
-- The lock set is collected with primary-key look-ups command by command and the rows are
-- locked one by one: a set-based query let the planner hash-join whole tables (entries grow
-- without bound), making every batch slower than the last (migration 0103).
-- Proved by: test/ledger/batch.test.ts › "gives the same results, messages, rows and balances as
-- the command-by-command path"; test/ledger/property.test.ts (concurrent mixed batches, no
-- deadlock, every guarantee).
CREATE OR REPLACE FUNCTION ledger_apply_each(p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
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
      WHEN 'post' THEN ledger_post_batch(jsonb_build_array(c))->0
      WHEN 'reverse' THEN ledger_do_reverse(c)
      WHEN 'hold' THEN ledger_do_hold(c)
      WHEN 'capture' THEN ledger_do_settle(c)
      WHEN 'void' THEN ledger_do_settle(c)
      WHEN 'expire' THEN ledger_do_expire(c)
      ELSE ledger_fail('INTERNAL', 'unknown ledger command') END;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;
