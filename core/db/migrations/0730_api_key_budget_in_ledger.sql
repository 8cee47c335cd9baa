-- API-key amount budgets count every movement a key makes (SPEC 5.4.5; issue 13 item 5).
-- The edge counts what it can read from the request (a posting's debit legs, a hold's amount);
-- a reversal or a capture names only an id, so the ledger counts what it moved, in the same
-- transaction that moves it, and refuses past the budget. Both count in one row per
-- key/day/currency, so together they can never exceed the budget.

-- One row per key, window and currency ('' for the per-minute request count).
ALTER TABLE api_key_usage ADD COLUMN currency text NOT NULL DEFAULT '';
-- Today's day rows so far were counted in the key's budget currency: they keep counting.
UPDATE api_key_usage u SET currency = k.budget->>'currency'
  FROM api_keys k WHERE u.key_id = k.id AND u.window_kind = 'day' AND k.budget->>'currency' IS NOT NULL;
ALTER TABLE api_key_usage DROP CONSTRAINT api_key_usage_pkey;
ALTER TABLE api_key_usage ADD PRIMARY KEY (key_id, window_kind, window_start, currency);

-- Take p_micros from the key's day row in p_currency unless that passes p_limit (all or
-- nothing; a concurrent taker waits on the row and sees the other's amount).
CREATE FUNCTION api_key_budget_take(p_key text, p_window timestamptz, p_currency text, p_micros bigint, p_limit bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  IF p_micros > p_limit THEN RETURN false; END IF;
  INSERT INTO api_key_usage AS u (key_id, window_kind, window_start, currency, count, amount_micros)
  VALUES (p_key, 'day', p_window, p_currency, 1, p_micros)
  ON CONFLICT (key_id, window_kind, window_start, currency)
  DO UPDATE SET count = u.count + 1, amount_micros = u.amount_micros + EXCLUDED.amount_micros
   WHERE u.amount_micros + EXCLUDED.amount_micros <= p_limit;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n = 1;
END $$;

-- Give back what the edge took for a request that moved nothing (refused, failed or replayed).
CREATE FUNCTION api_key_budget_release(p_key text, p_window timestamptz, p_currency text, p_micros bigint)
RETURNS void LANGUAGE sql AS $$
  UPDATE api_key_usage SET amount_micros = greatest(0, amount_micros - p_micros), count = greatest(0, count - 1)
   WHERE key_id = p_key AND window_kind = 'day' AND window_start = p_window AND currency = p_currency
$$;

-- Holds whose amount the edge counted against a key when it created them: the same key's
-- capture of such a hold moved money already counted, so it is not counted again.
CREATE TABLE api_key_counted_holds (
  tenant_id text NOT NULL,
  hold_id   uuid NOT NULL,
  key_id    text NOT NULL,
  PRIMARY KEY (tenant_id, hold_id)
);

-- Count the debit legs of posting p_posting against key p_key's daily budget. NULL when
-- counted (or the key has no amount budget); otherwise the refusal, as a ledger result. A leg
-- in another currency than the budget's cannot be counted, and is refused as at the edge.
CREATE FUNCTION api_key_budget_count_posting(p_tenant text, p_posting uuid, p_key text, p_window timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  b jsonb;
  v_currency text;
  v_other boolean;
  v_micros bigint;
BEGIN
  SELECT budget INTO b FROM api_keys WHERE tenant_id = p_tenant AND id = p_key;
  IF NOT FOUND THEN RETURN ledger_fail('BUDGET_EXCEEDED', 'API key budget exceeded (unknown key)'); END IF;
  IF b->>'daily_amount' IS NULL THEN RETURN NULL; END IF;
  v_currency := b->>'currency';
  SELECT bool_or(currency IS DISTINCT FROM v_currency), (coalesce(sum(amount) FILTER (WHERE side = 'debit'), 0) * 1000000)::bigint
    INTO v_other, v_micros
    FROM ledger_entries WHERE tenant_id = p_tenant AND posting_id = p_posting;
  IF v_other THEN
    RETURN ledger_fail('POLICY_DENIED', format('API key budget cannot count this request (currency_mismatch): the budget is in %s', v_currency));
  END IF;
  IF NOT api_key_budget_take(p_key, p_window, v_currency, v_micros, ((b->>'daily_amount')::numeric * 1000000)::bigint) THEN
    RETURN ledger_fail('BUDGET_EXCEEDED', 'API key budget exceeded (daily_amount)');
  END IF;
  RETURN NULL;
END $$;

-- The commands that move money by id keep their bodies under new names; the old names now
-- count the movement when the command carries `budget` {key_id, window_start}. The movement
-- and its count run in one subtransaction: a refusal undoes the movement and nothing else in
-- the batch, and the command answers the refusal like any other ledger failure.
ALTER FUNCTION ledger_do_reverse(jsonb) RENAME TO ledger_do_reverse_uncounted;
ALTER FUNCTION ledger_do_settle(jsonb) RENAME TO ledger_do_settle_uncounted;
ALTER FUNCTION ledger_do_hold(jsonb) RENAME TO ledger_do_hold_uncounted;

CREATE FUNCTION ledger_do_counted(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v jsonb;
  v_refused jsonb;
  k text := c->'budget'->>'key_id';
BEGIN
  IF k IS NULL THEN
    RETURN CASE c->>'op' WHEN 'reverse' THEN ledger_do_reverse_uncounted(c) ELSE ledger_do_settle_uncounted(c) END;
  END IF;
  BEGIN
    v := CASE c->>'op' WHEN 'reverse' THEN ledger_do_reverse_uncounted(c) ELSE ledger_do_settle_uncounted(c) END;
    IF (v->>'ok')::boolean AND c->>'op' IN ('reverse', 'capture')
       AND NOT (c->>'op' = 'capture' AND EXISTS (SELECT 1 FROM api_key_counted_holds
                 WHERE tenant_id = c->>'tenant' AND hold_id = (c->>'hold_id')::uuid AND key_id = k)) THEN
      v_refused := api_key_budget_count_posting(c->>'tenant', (c->>'id')::uuid, k, (c->'budget'->>'window_start')::timestamptz);
      IF v_refused IS NOT NULL THEN RAISE EXCEPTION USING ERRCODE = 'PB001', MESSAGE = v_refused::text; END IF;
    END IF;
    RETURN v;
  EXCEPTION WHEN SQLSTATE 'PB001' THEN
    RETURN SQLERRM::jsonb;
  END;
END $$;

CREATE FUNCTION ledger_do_reverse(c jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT ledger_do_counted(c) $$;
CREATE FUNCTION ledger_do_settle(c jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT ledger_do_counted(c) $$;

CREATE FUNCTION ledger_do_hold(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v jsonb := ledger_do_hold_uncounted(c);
BEGIN
  IF (v->>'ok')::boolean AND c->>'counted_by_key' IS NOT NULL THEN
    INSERT INTO api_key_counted_holds (tenant_id, hold_id, key_id) VALUES (c->>'tenant', (c->>'id')::uuid, c->>'counted_by_key');
  END IF;
  RETURN v;
END $$;
