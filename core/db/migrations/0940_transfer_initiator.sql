-- Delegated payer transfers (SPEC 2.7 `payer`, issue 20 item 3): a transfer records who
-- initiated it beside whose wallet pays (payer_customer_id). They differ only when a customer
-- holding a `payer` tuple over another moves that customer's money; the limits of both apply,
-- and both see the transfer in their history.
-- Additive (deploy/README.md expand, deploy, contract): the column stays nullable, and a trigger
-- fills it with the payer for rows a previous release's core inserts without it during a
-- rollout, so every row has it and the code may rely on it.
ALTER TABLE transfers ADD COLUMN initiator_customer_id uuid;
UPDATE transfers SET initiator_customer_id = payer_customer_id WHERE initiator_customer_id IS NULL;
ALTER TABLE transfers ADD CONSTRAINT transfers_initiator_fk
  FOREIGN KEY (tenant_id, initiator_customer_id) REFERENCES customers (tenant_id, id);
CREATE INDEX transfers_initiator_idx ON transfers (tenant_id, initiator_customer_id, created_at DESC, id DESC);

CREATE FUNCTION transfers_initiator_default() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.initiator_customer_id := coalesce(NEW.initiator_customer_id, NEW.payer_customer_id);
  RETURN NEW;
END $$;
CREATE TRIGGER transfers_initiator_default BEFORE INSERT OR UPDATE ON transfers
  FOR EACH ROW EXECUTE FUNCTION transfers_initiator_default();
