-- Float instructions, commission payouts and end-of-day close (issue 9 items 6, 7, 9).
-- States: core/agents/FLOAT.md. The money itself moves only through ledger_apply.

-- A redeem reserves the amount on the agent float with a ledger hold at request time (so the
-- agent cannot spend e-float it is cashing out); settle captures it, reject/cancel voids it.
ALTER TABLE agent_float_instructions ADD COLUMN hold_id uuid;
ALTER TABLE agent_float_instructions ADD CONSTRAINT agent_float_redeem_held CHECK (kind <> 'REDEEM' OR hold_id IS NOT NULL);
CREATE INDEX agent_float_instructions_agent_idx ON agent_float_instructions (tenant_id, agent_id, created_at);
CREATE INDEX agent_float_instructions_state_idx ON agent_float_instructions (tenant_id, state, created_at);

-- A commission entry is paid by exactly one accepted payout: PAID rows name it.
ALTER TABLE agent_commissions ADD CONSTRAINT agent_commissions_paid_by CHECK (state <> 'PAID' OR payout_id IS NOT NULL);
ALTER TABLE agent_commission_payouts ADD CONSTRAINT agent_payout_accepted_posted CHECK (state <> 'ACCEPTED' OR posting_id IS NOT NULL);
CREATE INDEX agent_commission_payouts_agent_idx ON agent_commission_payouts (tenant_id, agent_id, created_at);

-- Paid entries never change again (no double pay, no un-pay), whatever code path tries.
CREATE FUNCTION agent_commissions_paid_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.state = 'PAID' AND (NEW.state IS DISTINCT FROM OLD.state OR NEW.payout_id IS DISTINCT FROM OLD.payout_id OR NEW.amount <> OLD.amount) THEN
    RAISE EXCEPTION 'commission entry % is already paid', OLD.id USING ERRCODE = 'P0001', HINT = 'PAYOUT_ALREADY_ACCEPTED';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER agent_commissions_paid_final BEFORE UPDATE ON agent_commissions FOR EACH ROW EXECUTE FUNCTION agent_commissions_paid_final();

-- A closed day's summary is immutable.
CREATE FUNCTION agent_eod_closes_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'a closed business day cannot be changed' USING ERRCODE = 'P0001', HINT = 'DAY_CLOSED';
END $$;
CREATE TRIGGER agent_eod_closes_immutable BEFORE UPDATE OR DELETE ON agent_eod_closes FOR EACH ROW EXECUTE FUNCTION agent_eod_closes_immutable();
