-- Delegated payer transfers (SPEC 2.7 `payer`, issue 20 item 3): a transfer records who
-- initiated it beside whose wallet pays (payer_customer_id). They differ only when a customer
-- holding a `payer` tuple over another moves that customer's money; the limits of both apply,
-- and both see the transfer in their history.
ALTER TABLE transfers ADD COLUMN initiator_customer_id uuid;
UPDATE transfers SET initiator_customer_id = payer_customer_id WHERE initiator_customer_id IS NULL;
ALTER TABLE transfers ALTER COLUMN initiator_customer_id SET NOT NULL;
ALTER TABLE transfers ADD CONSTRAINT transfers_initiator_fk
  FOREIGN KEY (tenant_id, initiator_customer_id) REFERENCES customers (tenant_id, id);
CREATE INDEX transfers_initiator_idx ON transfers (tenant_id, initiator_customer_id, created_at DESC, id DESC);
