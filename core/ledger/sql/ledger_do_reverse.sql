-- The `reverse` command: ledger_do_reverse_uncounted, counted against an API key's budget when
-- the command carries one (G12, ledger_do_counted).
-- Proved by: test/e2e/apikey-budgets.test.ts › "refuses a 1000.00 reversal and a 1000.00 capture
-- past a 10.00 budget, moving nothing"; test/ledger/routes.test.ts › "reversal: inverse
-- entries, …".
CREATE OR REPLACE FUNCTION ledger_do_reverse(c jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT ledger_do_counted(c) $$;
