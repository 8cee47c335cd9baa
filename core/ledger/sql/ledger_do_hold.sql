-- The `hold` command: ledger_do_hold_uncounted; when the edge counted the hold's amount against
-- an API key (`counted_by_key`), the hold is remembered so that key's capture of it is not
-- counted a second time (G12).
-- Proved by: test/e2e/apikey-budgets.test.ts › "a hold the key created is counted once, when
-- created, not again when it captures it".
CREATE OR REPLACE FUNCTION ledger_do_hold(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v jsonb := ledger_do_hold_uncounted(c);
BEGIN
  IF (v->>'ok')::boolean AND c->>'counted_by_key' IS NOT NULL THEN
    INSERT INTO api_key_counted_holds (tenant_id, hold_id, key_id) VALUES (c->>'tenant', (c->>'id')::uuid, c->>'counted_by_key');
  END IF;
  RETURN v;
END $$;
