-- The hold-expiry sweeper's command: every listed hold still pending and past its expiry leaves
-- pending as expired, each hold locked and its status re-read first, so racing sweepers expire
-- each hold once (G7). Answers {ok, expired: how many this call expired, holds: their ids}, so
-- the sweeper audits exactly the holds it expired.
-- Proved by: test/shared-state/sweepers.test.ts › "without the exclusion, racing sweepers still
-- expire each hold once …".
CREATE OR REPLACE FUNCTION ledger_do_expire(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  h ledger_holds;
  v_n integer := 0;
  v_ids text[] := '{}';
BEGIN
  FOR h IN SELECT lh.* FROM jsonb_array_elements(c->'holds') x
             JOIN ledger_holds lh ON lh.tenant_id = x->>'tenant' AND lh.id = (x->>'id')::uuid
            WHERE lh.status = 'pending' AND lh.expires_at <= (c->>'now')::timestamptz
            ORDER BY lh.tenant_id, lh.id FOR UPDATE OF lh LOOP
    PERFORM ledger_close_hold(h, 'expired', NULL, NULL);
    v_n := v_n + 1;
    v_ids := v_ids || h.id::text;
  END LOOP;
  RETURN jsonb_build_object('ok', true, 'expired', v_n, 'holds', to_jsonb(v_ids));
END $$;
