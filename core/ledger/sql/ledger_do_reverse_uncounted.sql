-- A reversal (G6): the posting exists (POSTING_NOT_FOUND), is not itself a reversal
-- (POSTING_NOT_REVERSIBLE) and was not reversed before (POSTING_ALREADY_REVERSED; the partial
-- unique index ledger_postings_reverses_idx enforces it); then checks 10–13 on the inverse legs
-- and writes a new posting of kind `reversal` with the inverse legs in their original order, in
-- a new REVERSAL transaction, through the one posting writer; the original posting's
-- posting.reversed event follows. Corrections are new entries, never edits (G2).
-- ledger_do_reverse wraps it to count an API key's budget (G12).
-- Proved by: test/ledger/routes.test.ts › "reversal: inverse entries, at most once, not of a
-- reversal, not into negative", "database refuses a second reversal, …".
CREATE OR REPLACE FUNCTION ledger_do_reverse_uncounted(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text := c->>'tenant';
  p ledger_postings;
  v_entries jsonb;
  v_fail jsonb;
BEGIN
  SELECT * INTO p FROM ledger_postings WHERE tenant_id = v_tenant AND id = (c->>'posting_id')::uuid;
  IF NOT FOUND THEN RETURN ledger_fail('POSTING_NOT_FOUND', format('posting %s not found', c->>'posting_id')); END IF;
  IF p.kind = 'reversal' THEN RETURN ledger_fail('POSTING_NOT_REVERSIBLE', 'a reversal cannot itself be reversed'); END IF;
  IF EXISTS (SELECT 1 FROM ledger_postings WHERE tenant_id = v_tenant AND reverses_posting_id = p.id) THEN
    RETURN ledger_fail('POSTING_ALREADY_REVERSED', format('posting %s has already been reversed', p.id));
  END IF;
  SELECT jsonb_agg(jsonb_build_object('account_id', account_id, 'side', CASE side WHEN 'debit' THEN 'credit' ELSE 'debit' END,
                                      'amount', amount::text, 'currency', currency) ORDER BY leg)
    INTO v_entries FROM ledger_entries WHERE tenant_id = v_tenant AND posting_id = p.id;
  v_fail := ledger_check_legs(v_tenant, v_entries);
  IF v_fail IS NOT NULL THEN RETURN v_fail; END IF;
  PERFORM ledger_insert_postings(jsonb_build_array(jsonb_build_object(
    'tenant', v_tenant, 'id', c->>'id', 'transaction_id', c->>'transaction_id', 'type', 'REVERSAL', 'kind', 'reversal',
    'currency', p.currency, 'entries', v_entries, 'description', coalesce(c->>'description', 'reversal of ' || p.id),
    'metadata', '{}'::jsonb, 'reverses_posting_id', p.id)));
  INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload)
  VALUES (uuidv7(), v_tenant, 'posting', p.id::text, 'posting.reversed', jsonb_build_object('id', p.id, 'reversal_id', c->>'id'));
  RETURN jsonb_build_object('ok', true, 'created_at', ledger_ts(now()), 'currency', p.currency, 'entries', v_entries,
                            'reverses_posting_id', p.id);
END $$;
