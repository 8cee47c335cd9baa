-- One fee-income account per tenant and currency (issue 21 item 2). Transfers booked fees to a
-- tenant-owned FEE_INCOME account (owner_type 'tenant', owner_id the tenant's id); agent and
-- USSD operations to a platform-owned one (owner_id 'fee-income-<currency>'). From this release
-- every fee goes to the tenant-owned account (core/ledger/wallets.ts feeIncomeAccount says why).
-- This moves what the platform-owned accounts hold into it BY POSTING through ledger_apply (a
-- FEE posting per account: debit the old, credit the new), never by editing balances, and
-- records each move with the balances before it, so the reconciliation report
-- (core/ledger/fee-income.ts) shows before and after summing to the same totals, and core
-- appends an audit record for each move when it starts (audited_at).
--
-- Numbered before 0961: the ledger_apply this calls is, while migrations run, the body the
-- migrations left (function files are applied after them), and that body still posts through
-- ledger_do_post, which 0961 drops.
--
-- Re-runnable: an account already emptied has nothing to move, and a balance an old core booked
-- there during the rollout is moved by running this file's DO block again (test/ledger/fee-income.test.ts).

CREATE TABLE ledger_fee_income_moves (
  tenant_id    text NOT NULL REFERENCES tenants (id),
  posting_id   uuid NOT NULL,
  currency     char(3) NOT NULL,
  from_account uuid NOT NULL,
  to_account   uuid NOT NULL,
  amount       numeric(20,6) NOT NULL CHECK (amount > 0),
  -- posted balances (credits − debits) of both accounts just before the posting
  from_before  numeric(20,6) NOT NULL,
  to_before    numeric(20,6) NOT NULL,
  moved_at     timestamptz NOT NULL DEFAULT now(),
  audited_at   timestamptz,
  PRIMARY KEY (tenant_id, posting_id)
);
CREATE INDEX ledger_fee_income_moves_unaudited_idx ON ledger_fee_income_moves (moved_at) WHERE audited_at IS NULL;

DO $$
DECLARE
  a record;
  v_to uuid;
  v_from_before numeric(20,6);
  v_to_before numeric(20,6);
  v_post uuid;
  v_res jsonb;
BEGIN
  FOR a IN
    SELECT l.tenant_id, l.id, l.currency FROM ledger_accounts l
     WHERE l.owner_type = 'platform' AND l.product_code = 'FEE_INCOME' AND l.owner_id = 'fee-income-' || l.currency
     ORDER BY l.tenant_id, l.currency, l.created_at, l.id
  LOOP
    SELECT id INTO v_to FROM ledger_accounts
     WHERE tenant_id = a.tenant_id AND owner_type = 'tenant' AND owner_id = a.tenant_id
       AND product_code = 'FEE_INCOME' AND currency = a.currency AND status = 'active'
     ORDER BY created_at LIMIT 1;
    IF v_to IS NULL THEN
      -- Opened as core/ledger/accounts.ts openAccount does: account, zero balance row, event.
      v_to := gen_random_uuid();
      INSERT INTO ledger_accounts (tenant_id, id, owner_type, owner_id, product_code, currency, debits_must_not_exceed_credits)
      SELECT a.tenant_id, v_to, 'tenant', a.tenant_id, 'FEE_INCOME', a.currency, t.debits_must_not_exceed_credits
        FROM ledger_account_types t WHERE t.tenant_id = a.tenant_id AND t.code = 'FEE_INCOME';
      INSERT INTO ledger_balances (tenant_id, account_id, currency, debits_must_not_exceed_credits)
      SELECT tenant_id, id, currency, debits_must_not_exceed_credits FROM ledger_accounts WHERE tenant_id = a.tenant_id AND id = v_to;
      INSERT INTO outbox (id, tenant_id, aggregate, aggregate_id, event, payload)
      VALUES (gen_random_uuid(), a.tenant_id, 'account', v_to::text, 'account.created',
              jsonb_build_object('id', v_to, 'owner_type', 'tenant', 'owner_id', a.tenant_id,
                                 'product_code', 'FEE_INCOME', 'currency', a.currency, 'status', 'active'));
    END IF;
    SELECT credits_posted - debits_posted INTO v_from_before FROM ledger_balances WHERE tenant_id = a.tenant_id AND account_id = a.id;
    SELECT credits_posted - debits_posted INTO v_to_before FROM ledger_balances WHERE tenant_id = a.tenant_id AND account_id = v_to;
    IF v_from_before > 0 THEN
      INSERT INTO ledger_transaction_types (tenant_id, code, description, requires_two_factor)
      VALUES (a.tenant_id, 'FEE', 'Fee charge', false) ON CONFLICT DO NOTHING;
      v_post := gen_random_uuid();
      v_res := ledger_apply(jsonb_build_array(jsonb_build_object(
        'op', 'post', 'tenant', a.tenant_id, 'id', v_post, 'transaction_id', gen_random_uuid(),
        'type', 'FEE', 'currency', a.currency,
        'entries', jsonb_build_array(
          jsonb_build_object('account_id', a.id, 'side', 'debit', 'amount', v_from_before::text, 'currency', a.currency),
          jsonb_build_object('account_id', v_to, 'side', 'credit', 'amount', v_from_before::text, 'currency', a.currency)),
        'description', 'fee income moved to the tenant''s fee-income account (migration 0955)',
        'metadata', jsonb_build_object('migration', '0955_one_fee_income_account', 'from_account', a.id))));
      IF NOT coalesce((v_res->0->>'ok')::boolean, false) THEN
        RAISE EXCEPTION 'moving the fee income of tenant % in % was refused: % %',
          a.tenant_id, a.currency, v_res->0->>'code', v_res->0->>'message';
      END IF;
      INSERT INTO ledger_fee_income_moves (tenant_id, posting_id, currency, from_account, to_account, amount, from_before, to_before)
      VALUES (a.tenant_id, v_post, a.currency, a.id, v_to, v_from_before, v_from_before, v_to_before);
    END IF;
  END LOOP;
END $$;
