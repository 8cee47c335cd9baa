-- Capture and void of a hold (G7), result codes in the order of INVARIANTS.md: HOLD_NOT_FOUND,
-- HOLD_NOT_PENDING, HOLD_EXPIRED (the hold is expired by this request, and that sticks), then
-- for a capture CAPTURE_EXCEEDS_HOLD. A void releases the hold. A capture releases it first and
-- then posts the captured amount (a partial capture releases the rest), so the held amount is
-- never counted twice against the line; the posting is of kind `capture` in the hold's own
-- transaction, written by the one posting writer. ledger_do_settle wraps it to count an API
-- key's budget (G12).
-- Proved by: test/ledger/routes.test.ts › "holds: create, partial capture, void, capture voided
-- 409, over-capture 422, expiry".
CREATE OR REPLACE FUNCTION ledger_do_settle_uncounted(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text := c->>'tenant';
  h ledger_holds;
  v_amount numeric;
BEGIN
  SELECT * INTO h FROM ledger_holds WHERE tenant_id = v_tenant AND id = (c->>'hold_id')::uuid FOR UPDATE;
  IF NOT FOUND THEN RETURN ledger_fail('HOLD_NOT_FOUND', format('hold %s not found', c->>'hold_id')); END IF;
  IF h.status <> 'pending' THEN RETURN ledger_fail('HOLD_NOT_PENDING', format('hold %s is %s', h.id, h.status)); END IF;
  IF h.expires_at <= (c->>'now')::timestamptz THEN
    PERFORM ledger_close_hold(h, 'expired', NULL, NULL);
    RETURN ledger_fail('HOLD_EXPIRED', format('hold %s expired at %s', h.id, ledger_ts(h.expires_at)));
  END IF;
  IF c->>'op' = 'void' THEN
    PERFORM ledger_close_hold(h, 'voided', NULL, NULL);
    RETURN jsonb_build_object('ok', true, 'hold', ledger_hold_json(v_tenant, h.id));
  END IF;
  v_amount := coalesce((c->>'amount')::numeric, h.amount);
  IF v_amount > h.amount THEN
    RETURN ledger_fail('CAPTURE_EXCEEDS_HOLD', format('capture of %s exceeds the held %s', v_amount, h.amount));
  END IF;
  -- Release first, then post: the held amount is never counted twice against the line.
  PERFORM ledger_close_hold(h, 'captured', v_amount, (c->>'id')::uuid);
  PERFORM ledger_insert_postings(jsonb_build_array(jsonb_build_object(
    'tenant', v_tenant, 'id', c->>'id', 'transaction_id', h.transaction_id,
    'type', (SELECT type_code FROM ledger_transactions WHERE tenant_id = v_tenant AND id = h.transaction_id),
    'kind', 'capture', 'currency', h.currency, 'entries', jsonb_build_array(
      jsonb_build_object('account_id', h.debit_account_id, 'side', 'debit', 'amount', v_amount::text, 'currency', h.currency),
      jsonb_build_object('account_id', h.credit_account_id, 'side', 'credit', 'amount', v_amount::text, 'currency', h.currency)),
    'description', h.description, 'metadata', h.metadata, 'hold_id', h.id)));
  RETURN jsonb_build_object('ok', true, 'hold', ledger_hold_json(v_tenant, h.id));
END $$;
