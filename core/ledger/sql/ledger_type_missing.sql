-- Check 9 of INVARIANTS.md "Result codes" for one command: NULL when the tenant defines the
-- transaction type, otherwise UNKNOWN_TRANSACTION_TYPE.
-- Proved by: test/ledger/routes.test.ts › "result codes come in the documented order when a
-- request fails several checks".
CREATE OR REPLACE FUNCTION ledger_type_missing(p_tenant text, p_type text) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN EXISTS (SELECT 1 FROM ledger_transaction_types WHERE tenant_id = p_tenant AND code = p_type) THEN NULL
         ELSE ledger_fail('UNKNOWN_TRANSACTION_TYPE', format('transaction type %s is not defined', p_type)) END
$$;
