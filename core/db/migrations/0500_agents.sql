-- Agent operations (SPEC 1.3, 4.5, 5.3; issue 9). Every table carries tenant_id and every
-- query filters on it. Money columns are numeric(20,6) (SPEC 8); the money itself lives in
-- the ledger (agent float, agent commission, customer wallets): these tables only record
-- which postings belong to which agent operation and in which state it is.

CREATE TABLE agent_outlets (
  tenant_id  text NOT NULL REFERENCES tenants (id),
  id         uuid NOT NULL,
  name       text NOT NULL,
  region     text NOT NULL,
  address    text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);

-- An agent is a `user` subject with role `agent` at the edge; sessions.subject_type 'agent'.
-- The PIN is hashed exactly like a customer's (core/identity/pin.ts: argon2id + tenant pepper).
CREATE TABLE agents (
  tenant_id     text NOT NULL REFERENCES tenants (id),
  id            uuid NOT NULL,
  code          text NOT NULL CHECK (code ~ '^[A-Z0-9]{4,16}$'),
  phone_e164    text NOT NULL CHECK (phone_e164 ~ '^\+[0-9]{7,15}$'),
  name          text NOT NULL,
  status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
  tier          text NOT NULL DEFAULT 'standard' CHECK (tier IN ('basic', 'standard', 'super')),
  outlet_id     uuid NOT NULL,
  currency      char(3) NOT NULL,
  pin_hash      bytea NOT NULL,
  pin_salt      bytea NOT NULL,
  kdf_version   smallint NOT NULL,
  float_account_id      uuid NOT NULL,
  commission_account_id uuid NOT NULL,
  -- Per-agent limits (issue 9 "limits per agent"); NULL = no agent-level limit.
  txn_max_amount numeric(20,6) CHECK (txn_max_amount > 0),
  day_max_amount numeric(20,6) CHECK (day_max_amount > 0),
  display_name  text,
  language      text NOT NULL DEFAULT 'en',
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, code),
  UNIQUE (tenant_id, phone_e164),
  FOREIGN KEY (tenant_id, outlet_id) REFERENCES agent_outlets (tenant_id, id),
  FOREIGN KEY (tenant_id, float_account_id) REFERENCES ledger_accounts (tenant_id, id),
  FOREIGN KEY (tenant_id, commission_account_id) REFERENCES ledger_accounts (tenant_id, id)
);

-- The one bound device of an agent (Ed25519 key); binding a new one revokes the old.
CREATE TABLE agent_devices (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  agent_id    uuid NOT NULL,
  public_key  bytea NOT NULL CHECK (length(public_key) = 32),
  label       text,
  created_at  timestamptz NOT NULL,
  revoked_at  timestamptz,
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);
CREATE UNIQUE INDEX agent_devices_live_idx ON agent_devices (tenant_id, agent_id) WHERE revoked_at IS NULL;

-- Single-use device-bind tokens from an OTP verification (stored as SHA-256).
CREATE TABLE agent_bind_tokens (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  agent_id    uuid NOT NULL,
  token_hash  bytea NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz,
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);

-- KYC (issue 9 item 3). Level 1: name, ID, date of birth, verified phone; level 2: documents.
CREATE TABLE kyc_profiles (
  tenant_id      text NOT NULL,
  customer_id    uuid NOT NULL,
  level          smallint NOT NULL CHECK (level IN (1, 2)),
  status         text NOT NULL CHECK (status IN ('ACTIVE', 'EXPIRED', 'BLOCKED')),
  full_name      text NOT NULL,
  id_type        text NOT NULL CHECK (id_type IN ('NATIONAL_ID', 'PASSPORT', 'ALIEN_ID')),
  id_number      text NOT NULL,
  date_of_birth  date NOT NULL,
  registered_by  uuid NOT NULL,
  screening      jsonb NOT NULL DEFAULT '{}'::jsonb,
  expires_at     timestamptz NOT NULL,
  created_at     timestamptz NOT NULL,
  updated_at     timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, customer_id),
  UNIQUE (tenant_id, id_type, id_number),
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id)
);

CREATE TABLE kyc_documents (
  id           uuid PRIMARY KEY,
  tenant_id    text NOT NULL,
  customer_id  uuid NOT NULL,
  kind         text NOT NULL,
  sha256       text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  created_by   uuid NOT NULL,
  created_at   timestamptz NOT NULL,
  FOREIGN KEY (tenant_id, customer_id) REFERENCES kyc_profiles (tenant_id, customer_id)
);

-- The configurable watch-list screened at registration (normalised name and/or ID number).
CREATE TABLE kyc_watchlist (
  tenant_id  text NOT NULL REFERENCES tenants (id),
  id         uuid NOT NULL,
  name_norm  text,
  id_number  text,
  reason     text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  CHECK (name_norm IS NOT NULL OR id_number IS NOT NULL)
);

-- Agent-side transactions; states documented in core/agents/STATES.md.
CREATE TABLE agent_txns (
  tenant_id      text NOT NULL,
  id             uuid NOT NULL,
  kind           text NOT NULL CHECK (kind IN ('CASHIN', 'CASHOUT', 'P2P')),
  state          text NOT NULL CHECK (state IN ('INITIATED', 'AWAITING_CUSTOMER', 'POSTED', 'REVERSED', 'FAILED', 'EXPIRED')),
  agent_id       uuid NOT NULL,
  customer_id    uuid NOT NULL,
  counterparty_id uuid,
  currency       char(3) NOT NULL,
  amount         numeric(20,6) NOT NULL CHECK (amount > 0),
  fee            numeric(20,6) NOT NULL DEFAULT 0 CHECK (fee >= 0),
  commission     numeric(20,6) NOT NULL DEFAULT 0 CHECK (commission >= 0),
  business_date  date NOT NULL,
  posting_id     uuid,
  commission_posting_id uuid,
  reversal_posting_id   uuid,
  failure_code   text,
  attempts       integer NOT NULL DEFAULT 0,
  reference      text,
  expires_at     timestamptz,
  created_at     timestamptz NOT NULL,
  updated_at     timestamptz NOT NULL,
  posted_at      timestamptz,
  reversed_at    timestamptz,
  reversed_by    text,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id),
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id),
  CHECK (state <> 'POSTED' OR posting_id IS NOT NULL),
  CHECK (state <> 'REVERSED' OR reversal_posting_id IS NOT NULL)
);
CREATE INDEX agent_txns_agent_idx ON agent_txns (tenant_id, agent_id, business_date, created_at);
CREATE INDEX agent_txns_customer_idx ON agent_txns (tenant_id, customer_id, created_at);

-- Commission accruals (positive) and clawbacks (negative); a payout takes every ACCRUED row.
CREATE TABLE agent_commissions (
  tenant_id   text NOT NULL,
  id          uuid NOT NULL,
  agent_id    uuid NOT NULL,
  txn_id      uuid NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('ACCRUAL', 'CLAWBACK')),
  amount      numeric(20,6) NOT NULL CHECK (amount <> 0),
  currency    char(3) NOT NULL,
  state       text NOT NULL CHECK (state IN ('ACCRUED', 'PAID', 'CLAWED_BACK')),
  payout_id   uuid,
  created_at  timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);
CREATE INDEX agent_commissions_agent_idx ON agent_commissions (tenant_id, agent_id, state, created_at);

-- A payout preview names exactly the rows it would pay; accepting it pays them once.
CREATE TABLE agent_commission_payouts (
  tenant_id   text NOT NULL,
  id          uuid NOT NULL,
  agent_id    uuid NOT NULL,
  amount      numeric(20,6) NOT NULL,
  currency    char(3) NOT NULL,
  entry_ids   uuid[] NOT NULL,
  state       text NOT NULL CHECK (state IN ('PREVIEWED', 'ACCEPTED', 'STALE')),
  posting_id  uuid,
  created_at  timestamptz NOT NULL,
  accepted_at timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);

-- Float top-up and redeem instructions: PENDING → APPROVED → SETTLED, REJECTED, CANCELLED.
CREATE TABLE agent_float_instructions (
  tenant_id   text NOT NULL,
  id          uuid NOT NULL,
  agent_id    uuid NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('TOPUP', 'REDEEM')),
  state       text NOT NULL CHECK (state IN ('PENDING', 'APPROVED', 'SETTLED', 'REJECTED', 'CANCELLED')),
  amount      numeric(20,6) NOT NULL CHECK (amount > 0),
  currency    char(3) NOT NULL,
  reference   text NOT NULL DEFAULT '',
  posting_id  uuid,
  history     jsonb NOT NULL DEFAULT '[]'::jsonb,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id),
  CHECK (state <> 'SETTLED' OR posting_id IS NOT NULL)
);

-- End-of-day close: once a row exists the agent's business day is immutable.
CREATE TABLE agent_eod_closes (
  tenant_id     text NOT NULL,
  agent_id      uuid NOT NULL,
  business_date date NOT NULL,
  summary       jsonb NOT NULL,
  closed_at     timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, agent_id, business_date),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);

-- A closed day takes no new or backdated transactions, whatever code path tries (defence in depth).
CREATE FUNCTION agent_txns_day_open() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
    IF EXISTS (SELECT 1 FROM agent_eod_closes c WHERE c.tenant_id = NEW.tenant_id AND c.agent_id = NEW.agent_id
                AND c.business_date >= NEW.business_date) AND NEW.state IN ('INITIATED', 'AWAITING_CUSTOMER', 'POSTED') THEN
      RAISE EXCEPTION 'business day % of agent % is closed', NEW.business_date, NEW.agent_id USING ERRCODE = 'P0001', HINT = 'DAY_CLOSED';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER agent_txns_day_open BEFORE INSERT OR UPDATE ON agent_txns FOR EACH ROW EXECUTE FUNCTION agent_txns_day_open();
