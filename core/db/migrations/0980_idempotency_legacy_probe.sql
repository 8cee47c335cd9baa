-- Issue 18 item 2: the batch's key claim (ledger_apply_keyed) asks, for each key, whether a
-- `legacy` row (migration 0710) holds it. The only index that can answer is the primary key
-- (tenant_id, key, principal), and PostgreSQL 18 can skip-scan it on `principal = 'legacy'`
-- alone: a plan made while the key table was small reads the whole index once per key (0.3 ms
-- per key at 20,000 keys, growing with the table; the ledger bench fell from 2,900 to 800
-- postings/s). This index holds the legacy rows only (none on a database created after 0710, and
-- none once the 7-day retention has passed), so any plan for that question reads next to nothing.
-- Proved by: test/ledger/key-lookups.test.ts › "the claim's legacy check reads no primary-key
-- entries it does not need".
CREATE INDEX IF NOT EXISTS idempotency_keys_legacy_idx ON idempotency_keys (tenant_id, key)
  WHERE principal = 'legacy';
