-- ledger_apply now checks every command's amounts against admin_currencies in one statement for
-- the whole batch (issue 18 item 2: one SQL function call per command started an executor each),
-- so ledger_amount_misfit has no caller left and its file is gone (IF EXISTS: a database created
-- after this migration never had it, since function files are applied after the migrations).
-- contract: no code of any release calls ledger_amount_misfit (only ledger_apply's body did, and
-- a rollout replaces that body in the same transaction as this drop).
DROP FUNCTION IF EXISTS ledger_amount_misfit(jsonb);
