-- G1 (amounts exact in their currency): whether a command names an amount with more decimals
-- than its currency's minor units in admin's table (admin_currencies, the one source). Core
-- parses amounts against its snapshot of that table first, but a snapshot lags what another
-- instance did to a currency no account held (its minor units changed, then accounts opened in
-- it), so the write path checks the table itself: a posting's legs, a new hold, a partial capture
-- (in its hold's currency). Reversals, voids and expiries move amounts already checked.
-- Proved by: test/e2e/attack-final.test.ts › "amounts in a currency another instance re-scaled
-- and opened accounts in are read with the minor units of the table".
CREATE OR REPLACE FUNCTION ledger_amount_misfit(c jsonb) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
      FROM (SELECT coalesce(e->>'currency', c->>'currency') AS currency, e->>'amount' AS amount
              FROM jsonb_array_elements(CASE WHEN c->>'op' = 'post' THEN c->'entries' ELSE '[]'::jsonb END) e
            UNION ALL
            SELECT c->>'currency', c->>'amount' WHERE c->>'op' = 'hold'
            UNION ALL
            SELECT h.currency, c->>'amount' FROM ledger_holds h
             WHERE c->>'op' = 'capture' AND c->>'amount' IS NOT NULL
               AND h.tenant_id = c->>'tenant' AND h.id = (c->>'hold_id')::uuid) a
      JOIN admin_currencies m ON m.code = a.currency
     WHERE a.amount IS NOT NULL AND a.amount::numeric <> round(a.amount::numeric, m.minor_units))
$$;
