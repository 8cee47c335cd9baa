-- Idempotency keys are looked up by key, never scanned (issue 18 item 2). The key table grows
-- all day (rows kept 7 days), but its statistics can say "empty" (a fresh tenant, a table
-- analysed before today's traffic): then the planner scanned the whole table per batch, in two
-- places the ledger's write path runs on every batch, measured with the bench's own server
-- (bench/ledger/profile.ts; pg_stat_user_tables.seq_scan grew by one per key and per batch):
--   * ledger_apply_keyed's check for a legacy row of each key became a Nested Loop Anti Join
--     over a Seq Scan of idempotency_keys, once per key of the batch (0710 set no planner
--     guard, unlike every other ledger function);
--   * storing the batch's responses became a Hash Join over a Seq Scan (the `= ANY` condition
--     was applied as a filter on the scan, not as an index condition).
-- Both now run with the ledger's usual guards (no sequential scans, no hash or merge joins), so
-- each key costs one primary-key probe whatever the statistics say.

-- 0710's body stays; only the guards are added.
ALTER FUNCTION ledger_apply_keyed(jsonb, jsonb) SET enable_seqscan = off;
ALTER FUNCTION ledger_apply_keyed(jsonb, jsonb) SET enable_hashjoin = off;
ALTER FUNCTION ledger_apply_keyed(jsonb, jsonb) SET enable_mergejoin = off;

-- Store the responses of claimed keys (the ledger batch and core/idempotency's completeKeys):
-- one primary-key probe per key, in the same transaction as the claim. p_done is an array of
-- {tenant, key, principal, status, body, sealed (base64 or null)}.
CREATE FUNCTION idempotency_complete(p_done jsonb) RETURNS void LANGUAGE sql
  SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
  UPDATE idempotency_keys k SET response_status = d.status, response_body = d.body, response_sealed = decode(d.sealed, 'base64')
    FROM jsonb_to_recordset(p_done) AS d(tenant text, key text, principal text, status integer, body text, sealed text)
   WHERE k.tenant_id = d.tenant AND k.key = d.key AND k.principal = d.principal
$$;
