-- G1, G3, G5 (core/ledger/INVARIANTS.md), for every INSERT into ledger_entries whatever wrote it:
-- every posting of the statement arrived with all its legs (count and highest leg equal its
-- header's entry_count) and balances per currency; each (tenant, account, currency) of the
-- statement has its balance row (an entry's currency is its account's), and that row absorbs
-- the entries in the same statement, so a balance equals the sum of its entries at every commit.
-- Also the reference check the two foreign keys dropped in 0106 gave (G9): the posting exists.
-- Set-based (one statement per check, one UPDATE for the whole statement: a batch of postings
-- updates a hot account's balance row once), with hash and merge joins off so stale statistics
-- never turn a key look-up into a scan of a whole table.
-- Proved by: test/ledger/batch.test.ts › "the entries trigger refuses, for a whole multi-posting
-- statement: a posting short of a leg, an unbalanced one, a foreign currency, a balance below
-- its line"; test/ledger/property.test.ts (balances equal the model's after random concurrent runs).
CREATE OR REPLACE FUNCTION ledger_entries_apply() RETURNS trigger LANGUAGE plpgsql
  SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
  v_bad record;
  v_expected integer;
  v_updated integer;
BEGIN
  SELECT s.posting_id INTO v_bad
    FROM (SELECT tenant_id, posting_id, count(*) AS n, max(leg) AS mx FROM new_entries GROUP BY 1, 2) s
    LEFT JOIN ledger_postings p ON p.tenant_id = s.tenant_id AND p.id = s.posting_id
   WHERE p.id IS NULL OR s.n <> p.entry_count OR s.mx <> p.entry_count
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'ledger: posting % did not arrive with all its legs in one statement', v_bad.posting_id USING ERRCODE = 'LG001';
  END IF;
  SELECT posting_id, currency INTO v_bad FROM new_entries GROUP BY tenant_id, posting_id, currency
  HAVING sum(CASE side WHEN 'debit' THEN amount ELSE -amount END) <> 0 LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'ledger: posting % does not balance in %', v_bad.posting_id, v_bad.currency USING ERRCODE = 'LG001';
  END IF;
  WITH agg AS (
    SELECT tenant_id, account_id, currency,
           coalesce(sum(amount) FILTER (WHERE side = 'debit'), 0) AS d,
           coalesce(sum(amount) FILTER (WHERE side = 'credit'), 0) AS c
      FROM new_entries GROUP BY 1, 2, 3 ORDER BY 1, 2)
  UPDATE ledger_balances b
     SET debits_posted = b.debits_posted + agg.d, credits_posted = b.credits_posted + agg.c, version = b.version + 1
    FROM agg
   WHERE b.tenant_id = agg.tenant_id AND b.account_id = agg.account_id AND b.currency = agg.currency;
  GET DIAGNOSTICS v_updated = ROW_COUNT;
  SELECT count(*) INTO v_expected FROM (SELECT DISTINCT tenant_id, account_id, currency FROM new_entries) x;
  IF v_updated <> v_expected THEN
    RAISE EXCEPTION 'ledger: an entry''s currency is not its account''s currency' USING ERRCODE = 'LG003';
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER ledger_entries_apply AFTER INSERT ON ledger_entries
  REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_apply();
