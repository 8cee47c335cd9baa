-- A command's refusal, the one shape every ledger function answers: {ok: false, code, message}.
-- core/ledger maps the code to its HTTP status (INVARIANTS.md "Result codes").
-- Proved by: test/ledger/routes.test.ts › "result codes come in the documented order when a
-- request fails several checks".
CREATE OR REPLACE FUNCTION ledger_fail(p_code text, p_message text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('ok', false, 'code', p_code, 'message', p_message)
$$;
