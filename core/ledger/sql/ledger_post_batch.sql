-- The ledger's one posting implementation's checks and writes (issue 21 item 3): every `post`
-- command runs here, a batch made only of postings all at once (ledger_apply), a post inside a
-- mixed batch as a batch of one (ledger_apply_each). Answers one result per command, in order:
-- {ok, created_at} or the first failing check of INVARIANTS.md "Result codes" 9–13, with the
-- messages of ledger_type_missing and ledger_check_legs.
-- Set-based, in one call: parse the legs once; lock every balance row of the batch in one
-- statement, in the global order (tenant_id, account_id) (a row the caller already locked, as
-- ledger_apply_each does, is taken again without waiting); checks 9–12 for all commands at
-- once; check 13 (funds, G4) for all commands at once with a running sum per account in
-- arrival order, which equals the
-- sequential result as long as no earlier command fails: the first command that fails is
-- marked and the pass repeats without it (one pass when nothing fails); then
-- ledger_insert_postings writes the commands that passed, one INSERT per table, so the entries
-- trigger runs once and updates each balance row once (a hot account: one update per batch).
-- Proved by: test/ledger/batch.test.ts › "gives the same results, messages, rows and balances as
-- the command-by-command path", "ledger_apply answers every command of a postings batch, in
-- order"; test/ledger/property.test.ts; test/ledger/routes.test.ts › "result codes come in the
-- documented order when a request fails several checks".
CREATE OR REPLACE FUNCTION ledger_post_batch(p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
DECLARE
  v_n integer := jsonb_array_length(p_cmds);
  l_n integer[];
  l_leg smallint[];
  l_t text[];
  l_a uuid[];
  l_net numeric[];
  l_cur text[];
  v_fail jsonb[];
  v_bad record;
  v_ok jsonb := jsonb_build_object('ok', true, 'created_at', ledger_ts(now()));
BEGIN
  IF v_n = 0 THEN RETURN '[]'::jsonb; END IF;
  -- The legs, parsed once: command number, leg number, tenant, account, signed amount, currency.
  SELECT array_agg(c.n ORDER BY c.n, e.leg), array_agg(e.leg::smallint ORDER BY c.n, e.leg),
         array_agg(c.c->>'tenant' ORDER BY c.n, e.leg), array_agg((e.e->>'account_id')::uuid ORDER BY c.n, e.leg),
         array_agg(CASE e.e->>'side' WHEN 'credit' THEN (e.e->>'amount')::numeric ELSE -(e.e->>'amount')::numeric END ORDER BY c.n, e.leg),
         array_agg(e.e->>'currency' ORDER BY c.n, e.leg)
    INTO l_n, l_leg, l_t, l_a, l_net, l_cur
    FROM jsonb_array_elements(p_cmds) WITH ORDINALITY c(c, n), jsonb_array_elements(c.c->'entries') WITH ORDINALITY e(e, leg);

  -- Lock phase: every balance row of the batch, in one statement, in (tenant_id, account_id) order.
  PERFORM 1 FROM (SELECT DISTINCT u.t, u.a FROM unnest(l_t, l_a) u(t, a)) k
    JOIN ledger_balances b ON b.tenant_id = k.t AND b.account_id = k.a
   ORDER BY b.tenant_id, b.account_id
   FOR UPDATE OF b;

  -- Checks 9–12 (they do not depend on other commands): first failing leg in leg order.
  SELECT array_agg(x.f ORDER BY x.n) INTO v_fail FROM (
    SELECT c.n, CASE
      WHEN tt.code IS NULL THEN ledger_fail('UNKNOWN_TRANSACTION_TYPE', format('transaction type %s is not defined', c.c->>'type'))
      WHEN s.missing IS NOT NULL THEN ledger_fail('ACCOUNT_NOT_FOUND', format('account %s not found', s.missing))
      WHEN s.closed IS NOT NULL THEN ledger_fail('ACCOUNT_CLOSED', format('account %s is closed', s.closed))
      WHEN s.mismatch IS NOT NULL THEN ledger_fail('CURRENCY_MISMATCH', format('account %s does not hold the entry''s currency', s.mismatch))
      END AS f
      FROM jsonb_array_elements(p_cmds) WITH ORDINALITY c(c, n)
      LEFT JOIN ledger_transaction_types tt ON tt.tenant_id = c.c->>'tenant' AND tt.code = c.c->>'type'
      LEFT JOIN (
        SELECT l.n,
               (array_agg(l.a ORDER BY l.leg) FILTER (WHERE ac.id IS NULL))[1] AS missing,
               (array_agg(l.a ORDER BY l.leg) FILTER (WHERE ac.status <> 'active'))[1] AS closed,
               (array_agg(l.a ORDER BY l.leg) FILTER (WHERE ac.status = 'active' AND ac.currency <> l.cur))[1] AS mismatch
          FROM unnest(l_n, l_leg, l_t, l_a, l_cur) l(n, leg, t, a, cur)
          LEFT JOIN ledger_accounts ac ON ac.tenant_id = l.t AND ac.id = l.a
         GROUP BY l.n) s ON s.n = c.n) x;

  -- Check 13: a command's debited account must stay at or above its line after every earlier
  -- command that succeeds. The running sum assumes all earlier commands succeed; the first
  -- command that fails is marked and the pass repeats without it (exactly the sequential result).
  LOOP
    SELECT x.n, x.a INTO v_bad
      FROM (SELECT s.n, s.t, s.a, s.net, sum(s.net) OVER (PARTITION BY s.t, s.a ORDER BY s.n) AS run
              FROM (SELECT l.n, l.t, l.a, sum(l.net) AS net FROM unnest(l_n, l_t, l_a, l_net) l(n, t, a, net)
                     WHERE v_fail[l.n] IS NULL GROUP BY 1, 2, 3) s) x
      JOIN ledger_balances b ON b.tenant_id = x.t AND b.account_id = x.a
     WHERE x.net < 0 AND b.debits_must_not_exceed_credits
       AND b.credits_posted - b.debits_posted - b.pending_debits + b.overdraft_limit + x.run < 0
     ORDER BY x.n, x.a LIMIT 1;
    EXIT WHEN NOT FOUND;
    v_fail[v_bad.n] := ledger_fail('INSUFFICIENT_FUNDS', format('account %s has insufficient available funds', v_bad.a));
  END LOOP;

  PERFORM ledger_insert_postings(p_cmds, v_fail);
  RETURN (SELECT jsonb_agg(coalesce(v_fail[i], v_ok) ORDER BY i) FROM generate_series(1, v_n) i);
END $$;
