-- The ledger's functions now live one per file in core/ledger/sql/ (issue 21 item 3), applied by
-- core/db/migrate.ts after the migrations, in the same transaction. ledger_cmd_accounts, the lock
-- set of 0102's first ledger_apply, has had no caller since 0103 replaced that body, and gets no
-- file: it is dropped.
-- contract: no code of any release calls ledger_cmd_accounts (only 0102's ledger_apply body did,
-- replaced by 0103 before the first release).
DROP FUNCTION ledger_cmd_accounts(jsonb);
