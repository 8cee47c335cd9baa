-- Disputes on agent transactions (issue 9 item 8). A case belongs to the agent who opened it;
-- attachments are stored with their SHA-256 and the type their magic bytes prove.

CREATE TABLE agent_disputes (
  tenant_id   text NOT NULL,
  id          uuid NOT NULL,
  agent_id    uuid NOT NULL,
  txn_id      uuid NOT NULL,
  reason      text NOT NULL CHECK (reason IN ('WRONG_AMOUNT', 'WRONG_CUSTOMER', 'NOT_RECEIVED', 'DUPLICATE', 'FRAUD_SUSPECTED', 'OTHER')),
  description text NOT NULL CHECK (length(description) BETWEEN 1 AND 2000),
  state       text NOT NULL CHECK (state IN ('OPEN', 'UNDER_REVIEW', 'RESOLVED', 'REJECTED')),
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id),
  FOREIGN KEY (tenant_id, txn_id) REFERENCES agent_txns (tenant_id, id)
);
-- One live case per transaction.
CREATE UNIQUE INDEX agent_disputes_live_idx ON agent_disputes (tenant_id, txn_id) WHERE state IN ('OPEN', 'UNDER_REVIEW');

CREATE TABLE agent_dispute_attachments (
  tenant_id    text NOT NULL,
  id           uuid NOT NULL,
  case_id      uuid NOT NULL,
  filename     text NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),
  media_type   text NOT NULL CHECK (media_type IN ('image/png', 'image/jpeg', 'application/pdf')),
  size_bytes   integer NOT NULL CHECK (size_bytes BETWEEN 1 AND 5242880),
  sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  content      bytea NOT NULL CHECK (length(content) = size_bytes),
  created_by   uuid NOT NULL,
  created_at   timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, case_id) REFERENCES agent_disputes (tenant_id, id)
);
CREATE INDEX agent_dispute_attachments_case_idx ON agent_dispute_attachments (tenant_id, case_id, created_at);
