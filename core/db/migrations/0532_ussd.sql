-- Customer "send money" on USSD (issue 9 item 11): one row per transfer, linked to its ledger
-- posting; one transfer per gateway session (a gateway retrying the last request replays it).
CREATE TABLE ussd_transfers (
  tenant_id     text NOT NULL,
  id            uuid NOT NULL,
  ussd_session  text NOT NULL,
  customer_id   uuid NOT NULL,
  recipient_id  uuid NOT NULL,
  currency      char(3) NOT NULL,
  amount        numeric(20,6) NOT NULL CHECK (amount > 0),
  fee           numeric(20,6) NOT NULL CHECK (fee >= 0),
  business_date date NOT NULL,
  posting_id    uuid NOT NULL,
  created_at    timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, ussd_session),
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id),
  FOREIGN KEY (tenant_id, recipient_id) REFERENCES customers (tenant_id, id)
);
CREATE INDEX ussd_transfers_customer_idx ON ussd_transfers (tenant_id, customer_id, business_date);
