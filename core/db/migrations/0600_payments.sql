-- Customer money movement (issue 7): payees and transfers. Money moves only through the
-- ledger (holds at create, captures at confirm); these tables record the customer journey.
CREATE TABLE beneficiaries (
  id                uuid PRIMARY KEY,
  tenant_id         text NOT NULL REFERENCES tenants(id),
  customer_id       uuid NOT NULL,
  payee_customer_id uuid NOT NULL,
  nickname          text,
  created_at        timestamptz NOT NULL DEFAULT now(),
  removed_at        timestamptz,
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id),
  FOREIGN KEY (tenant_id, payee_customer_id) REFERENCES customers (tenant_id, id),
  CHECK (customer_id <> payee_customer_id)
);
CREATE UNIQUE INDEX beneficiaries_active_uq ON beneficiaries (tenant_id, customer_id, payee_customer_id) WHERE removed_at IS NULL;
CREATE INDEX beneficiaries_customer_idx ON beneficiaries (tenant_id, customer_id, created_at);

CREATE TABLE transfers (
  id                uuid PRIMARY KEY,
  tenant_id         text NOT NULL REFERENCES tenants(id),
  payer_customer_id uuid NOT NULL,
  payee_customer_id uuid NOT NULL,
  beneficiary_id    uuid NOT NULL REFERENCES beneficiaries(id),
  payer_account_id  uuid NOT NULL,
  payee_account_id  uuid NOT NULL,
  fee_account_id    uuid,
  currency          char(3) NOT NULL,
  amount            numeric(20,6) NOT NULL CHECK (amount > 0),
  fee               numeric(20,6) NOT NULL CHECK (fee >= 0),
  reference         text NOT NULL,
  -- PENDING (held) → POSTED (captured) | FAILED (refused at confirm) | EXPIRED (holds lapsed)
  status            text NOT NULL CHECK (status IN ('PENDING', 'POSTED', 'FAILED', 'EXPIRED')),
  amount_hold_id    uuid NOT NULL,
  fee_hold_id       uuid,
  posting_ids       uuid[] NOT NULL DEFAULT '{}',
  fee_schedule_id   text,
  orig              text NOT NULL,
  intent_device_id  uuid NOT NULL,
  failure_code      text,
  created_at        timestamptz NOT NULL,
  expires_at        timestamptz NOT NULL,
  confirmed_at      timestamptz,
  FOREIGN KEY (tenant_id, payer_customer_id) REFERENCES customers (tenant_id, id),
  FOREIGN KEY (tenant_id, payee_customer_id) REFERENCES customers (tenant_id, id)
);
CREATE INDEX transfers_payer_idx ON transfers (tenant_id, payer_customer_id, created_at DESC, id DESC);
CREATE INDEX transfers_payee_idx ON transfers (tenant_id, payee_customer_id, created_at DESC, id DESC);

CREATE TABLE transfer_status_history (
  tenant_id   text NOT NULL,
  transfer_id uuid NOT NULL REFERENCES transfers(id),
  status      text NOT NULL,
  reason      text,
  at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX transfer_status_history_idx ON transfer_status_history (tenant_id, transfer_id, at);
