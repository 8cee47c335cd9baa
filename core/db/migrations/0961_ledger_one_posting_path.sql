-- One posting implementation (issue 21 item 3). A post inside a mixed batch now runs through
-- ledger_post_batch as a batch of one (core/ledger/sql/ledger_apply_each.sql), and every posting,
-- whatever its kind, is written by ledger_insert_postings (reversals and captures included), so
-- the per-command path and its one-posting writer are gone:
--   * ledger_do_post: the `post` command of the command-by-command path, a second copy of the
--     checks and writes of ledger_post_batch that had to change with it;
--   * ledger_write_posting: the one-posting writer used by ledger_do_post, reversals and captures.
-- contract: no TypeScript of any release calls these two (only ledger function bodies did, and
-- the bodies that called them are replaced by core/ledger/sql in the same transaction as this
-- drop: core/db/migrate.ts applies pending migrations and changed function files together).
DROP FUNCTION ledger_do_post(jsonb);
DROP FUNCTION ledger_write_posting(text, uuid, uuid, text, text, text, jsonb, text, jsonb, uuid, uuid);
