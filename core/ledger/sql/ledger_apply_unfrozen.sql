-- ledger_apply once fraud holds are dealt with: a batch made only of postings (every batch of
-- POST /v1/core/postings, the common case) runs set-based in ledger_post_batch, anything else
-- command by command in ledger_apply_each. Both give the same results, rows and balances for
-- the same postings.
-- Proved by: test/ledger/batch.test.ts › "ledger_apply answers every command of a postings
-- batch, in order", "gives the same results, messages, rows and balances as the
-- command-by-command path".
CREATE OR REPLACE FUNCTION ledger_apply_unfrozen(p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
BEGIN
  IF jsonb_array_length(p_cmds) = 0 THEN RETURN '[]'::jsonb; END IF;
  IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_cmds) c WHERE c->>'op' IS DISTINCT FROM 'post') THEN
    RETURN ledger_post_batch(p_cmds);
  END IF;
  RETURN ledger_apply_each(p_cmds);
END $$;
