-- The one place a posting is written (issue 21 item 3: one posting implementation), for every
-- kind: ordinary postings (ledger_post_batch, alone or for a whole batch), reversals
-- (ledger_do_reverse_uncounted) and captures (ledger_do_settle_uncounted). The caller has run
-- the checks and holds the balance row locks; this writes the rows only, one INSERT per table
-- for all of p_postings, in arrival order:
--   * a posting other than a capture opens its domain transaction, POSTED, with its first
--     history row (a capture belongs to its hold's transaction, which ledger_close_hold moves);
--   * the header, then every leg of every posting in one INSERT: the entries statement trigger
--     (ledger_entries_apply) checks each posting complete and balanced and applies the legs to
--     the balance rows, once per statement (G1, G3, G5);
--   * the posting.created event in the outbox, in the same transaction (G10).
-- p_postings: [{tenant, id, transaction_id, type, currency, entries, description, metadata,
-- kind (default 'posting'), reverses_posting_id, hold_id}]; p_refused[n] not NULL skips the
-- n-th (1-based): a batch passes its refusals and writes the rest.
-- No planner settings of its own: it runs inside ledger_apply (or ledger_post_batch), whose
-- guards (no sequential scans, no hash or merge joins) hold for everything they call.
-- Proved by: test/ledger/batch.test.ts › "gives the same results, messages, rows and balances as
-- the command-by-command path" (rows and events of both paths); test/ledger/routes.test.ts ›
-- "multi-leg and multi-currency postings; GET posting; outbox and audit in the same
-- transaction", "reversal: inverse entries, …", "holds: create, partial capture, …".
CREATE OR REPLACE FUNCTION ledger_insert_postings(p_postings jsonb, p_refused jsonb[] DEFAULT NULL) RETURNS void
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ledger_transactions (tenant_id, id, type_code, status)
  SELECT c->>'tenant', (c->>'transaction_id')::uuid, c->>'type', 'POSTED'
    FROM jsonb_array_elements(p_postings) WITH ORDINALITY x(c, n)
   WHERE p_refused[n] IS NULL AND c->>'kind' IS DISTINCT FROM 'capture' ORDER BY n;
  INSERT INTO ledger_transaction_history (tenant_id, transaction_id, from_status, to_status)
  SELECT c->>'tenant', (c->>'transaction_id')::uuid, NULL, 'POSTED'
    FROM jsonb_array_elements(p_postings) WITH ORDINALITY x(c, n)
   WHERE p_refused[n] IS NULL AND c->>'kind' IS DISTINCT FROM 'capture' ORDER BY n;
  INSERT INTO ledger_postings (tenant_id, id, transaction_id, type_code, kind, currency, entry_count, description, metadata,
                               reverses_posting_id, hold_id)
  SELECT c->>'tenant', (c->>'id')::uuid, (c->>'transaction_id')::uuid, c->>'type', coalesce(c->>'kind', 'posting'),
         c->>'currency', jsonb_array_length(c->'entries'), c->>'description', coalesce(c->'metadata', '{}'::jsonb),
         (c->>'reverses_posting_id')::uuid, (c->>'hold_id')::uuid
    FROM jsonb_array_elements(p_postings) WITH ORDINALITY x(c, n) WHERE p_refused[n] IS NULL ORDER BY n;
  INSERT INTO ledger_entries (tenant_id, posting_id, leg, account_id, side, amount, currency)
  SELECT c->>'tenant', (c->>'id')::uuid, e.leg, (e.e->>'account_id')::uuid, e.e->>'side', (e.e->>'amount')::numeric, e.e->>'currency'
    FROM jsonb_array_elements(p_postings) WITH ORDINALITY x(c, n), jsonb_array_elements(c->'entries') WITH ORDINALITY e(e, leg)
   WHERE p_refused[n] IS NULL ORDER BY n, e.leg;
  INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload)
  SELECT uuidv7(), c->>'tenant', 'posting', (c->>'id')::uuid::text, 'posting.created', jsonb_build_object(
           'id', (c->>'id')::uuid, 'transaction_id', (c->>'transaction_id')::uuid, 'kind', coalesce(c->>'kind', 'posting'),
           'type', c->>'type', 'currency', c->>'currency', 'entries', c->'entries',
           'reverses_posting_id', (c->>'reverses_posting_id')::uuid, 'hold_id', (c->>'hold_id')::uuid)
    FROM jsonb_array_elements(p_postings) WITH ORDINALITY x(c, n) WHERE p_refused[n] IS NULL ORDER BY n;
END $$;
