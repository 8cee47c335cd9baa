-- contract: widening only (numeric(20,6) to numeric(38,6), same scale): every released reader
-- gets the same text for every value it could read before. PostgreSQL changes the type without
-- rewriting the table (a precision increase at the same scale is binary-compatible; checked on
-- PostgreSQL 18: same relfilenode), but it scans the table once to verify the CHECK constraints
-- on these columns again, under the ALTER's exclusive lock: a balance-sized table pauses writes
-- for that scan.
--
-- The four sums of a balance row were numeric(20,6), the type of one amount (SPEC 8), but they
-- are not amounts: debits_posted and credits_posted add up every entry an account ever had, and
-- pending_debits and pending_credits every hold it has open. A settlement account (which may go
-- negative without bound) reaches 10^14 units of lifetime debits in the ordinary course of
-- business (in UGX, which has no minor units, within months of a large operator's volume), or at
-- once with one posting of the largest amount the API accepts; from then on every posting that
-- debits it failed on a numeric overflow (answered 400 VALIDATION_FAILED, not stored under its
-- key, and rolling back every other posting of its batch), and a reversal cannot help because the
-- counter only grows. Likewise one balanced posting of 32 maximal legs into one account
-- overflowed its credits. numeric(38,6) leaves 10^32 units of headroom: no account reaches it.
-- Proved by: test/e2e/attack-ledger.test.ts › "a settlement account still takes debits after a
-- posting of the largest amount the API accepts", "a balanced posting whose legs add up past an
-- account counter is answered once and for all, beside neighbours that post".
ALTER TABLE ledger_balances
  ALTER COLUMN debits_posted TYPE numeric(38,6),
  ALTER COLUMN credits_posted TYPE numeric(38,6),
  ALTER COLUMN pending_debits TYPE numeric(38,6),
  ALTER COLUMN pending_credits TYPE numeric(38,6);
