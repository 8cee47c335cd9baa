-- Staff purposes (issue 20 item 4; SPEC 2.5): wallet fraud holds, enforced where money moves,
-- and customers' recorded consents (marketing.personalize), which the edge reads.

-- A fraud hold blocks debits and new holds on one account (a customer's wallet) but never its
-- incoming credits. Lifted only by a different fraud officer than the one who placed it (the
-- CHECK makes that a database guarantee, not only a route check). Rows are never deleted.
CREATE TABLE wallet_fraud_holds (
  tenant_id   text NOT NULL REFERENCES tenants (id),
  id          uuid NOT NULL,
  account_id  uuid NOT NULL,
  reason      text NOT NULL CHECK (length(reason) BETWEEN 3 AND 500),
  placed_by   text NOT NULL,
  placed_at   timestamptz NOT NULL,
  lifted_by   text,
  lifted_at   timestamptz,
  lift_reason text,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, account_id) REFERENCES ledger_accounts (tenant_id, id),
  CHECK (lifted_by IS NULL OR lifted_by <> placed_by),
  CHECK ((lifted_by IS NULL) = (lifted_at IS NULL))
);
CREATE UNIQUE INDEX wallet_fraud_holds_active_idx ON wallet_fraud_holds (tenant_id, account_id) WHERE lifted_at IS NULL;
CREATE TRIGGER wallet_fraud_holds_no_delete BEFORE DELETE ON wallet_fraud_holds
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();

-- The accounts a ledger command takes money from: a posting's legs whose net is a debit, a
-- new hold's debit account. Captures, voids, expiries and reversals settle or undo what was
-- already authorised and are not refused by a fraud hold.
CREATE FUNCTION ledger_debited_accounts(c jsonb) RETURNS TABLE (account_id uuid) LANGUAGE sql IMMUTABLE AS $$
  SELECT (e->>'account_id')::uuid FROM jsonb_array_elements(CASE WHEN c->>'op' = 'post' THEN c->'entries' ELSE '[]'::jsonb END) e
   GROUP BY 1 HAVING sum(CASE e->>'side' WHEN 'credit' THEN (e->>'amount')::numeric ELSE -(e->>'amount')::numeric END) < 0
  UNION ALL
  SELECT (c->>'debit_account_id')::uuid WHERE c->>'op' = 'hold'
$$;

-- The 0104 body of ledger_apply, unchanged, under its own name.
CREATE FUNCTION ledger_apply_unfrozen(p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
BEGIN
  IF jsonb_array_length(p_cmds) = 0 THEN RETURN '[]'::jsonb; END IF;
  IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_cmds) c WHERE c->>'op' IS DISTINCT FROM 'post') THEN
    RETURN ledger_post_batch(p_cmds);
  END IF;
  RETURN ledger_apply_each(p_cmds);
END $$;

-- ledger_apply, fourth version: every ledger write (the batcher, transfers, agents) passes
-- here, so this is the one place debits are authorised. A command that debits an account
-- under an active fraud hold answers ACCOUNT_FROZEN before anything else; the others run as before.
CREATE OR REPLACE FUNCTION ledger_apply(p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
DECLARE
  v_frozen integer[];
  v_run integer[];
  v_res jsonb;
BEGIN
  SELECT array_agg(c.n ORDER BY c.n) INTO v_frozen
    FROM jsonb_array_elements(p_cmds) WITH ORDINALITY c(c, n)
   WHERE EXISTS (SELECT 1 FROM ledger_debited_accounts(c.c) d
                   JOIN wallet_fraud_holds h ON h.tenant_id = c.c->>'tenant' AND h.account_id = d.account_id AND h.lifted_at IS NULL);
  IF v_frozen IS NULL THEN RETURN ledger_apply_unfrozen(p_cmds); END IF;
  SELECT array_agg(g ORDER BY g) INTO v_run FROM generate_series(1, jsonb_array_length(p_cmds)) g WHERE NOT g = ANY (v_frozen);
  v_res := ledger_apply_unfrozen(coalesce((SELECT jsonb_agg(p_cmds->(i - 1) ORDER BY o) FROM unnest(v_run) WITH ORDINALITY u(i, o)), '[]'::jsonb));
  RETURN (SELECT jsonb_agg(CASE WHEN u.o IS NULL
                                THEN ledger_fail('ACCOUNT_FROZEN', 'the account is under a fraud hold: debits and new holds are refused')
                                ELSE v_res->(u.o::integer - 1) END ORDER BY g.n)
            FROM generate_series(1, jsonb_array_length(p_cmds)) g(n)
            LEFT JOIN unnest(v_run) WITH ORDINALITY u(i, o) ON u.i = g.n);
END $$;

-- Customers' consents (SPEC 2.5 consent_required purposes): granted with the terms version the
-- customer accepted, withdrawn by setting withdrawn_at; a new grant after a withdrawal is a new
-- row, so the history stays. The edge caches a customer's live consents and drops them on NOTIFY.
CREATE TABLE customer_consents (
  tenant_id     text NOT NULL,
  customer_id   uuid NOT NULL,
  id            uuid NOT NULL,
  purpose       text NOT NULL,
  terms_version text NOT NULL CHECK (terms_version ~ '^[A-Za-z0-9._-]{1,40}$'),
  granted_at    timestamptz NOT NULL,
  withdrawn_at  timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id)
);
CREATE UNIQUE INDEX customer_consents_live_idx ON customer_consents (tenant_id, customer_id, purpose) WHERE withdrawn_at IS NULL;

CREATE FUNCTION customer_consents_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('consents_changed', json_build_object('tenantId', NEW.tenant_id, 'customerId', NEW.customer_id)::text);
  RETURN NULL;
END $$;
CREATE TRIGGER customer_consents_changed AFTER INSERT OR UPDATE ON customer_consents
  FOR EACH ROW EXECUTE FUNCTION customer_consents_notify();
CREATE TRIGGER customer_consents_no_delete BEFORE DELETE ON customer_consents
  FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
