-- Core banking ledger (issue 5; SPEC 2.1, 2 "ledger storage concepts", 8 numeric(20,6)).
-- Every table carries tenant_id and every key starts with it, so the ledger can be split by
-- tenant without a schema change (DESIGN.md "Growing past one machine").
-- The guarantees these tables enforce are listed in core/ledger/INVARIANTS.md.

-- Account types: the product code an account is opened under, and its balance rule.
CREATE TABLE ledger_account_types (
  tenant_id   text NOT NULL REFERENCES tenants (id),
  code        text NOT NULL CHECK (code ~ '^[A-Z][A-Z0-9_]{1,39}$'),
  description text NOT NULL,
  -- false only for settlement-like accounts: the source of money entering the platform.
  debits_must_not_exceed_credits boolean NOT NULL DEFAULT true,
  open_via_api boolean NOT NULL DEFAULT true,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, code)
);

-- Accounts (SPEC 2.1). Balances are credit-normal: posted = credits - debits.
CREATE TABLE ledger_accounts (
  tenant_id    text NOT NULL REFERENCES tenants (id),
  id           uuid NOT NULL,
  owner_type   text NOT NULL,
  owner_id     text NOT NULL,
  product_code text NOT NULL,
  currency     char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  status       text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
  debits_must_not_exceed_credits boolean NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  closed_at    timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, product_code) REFERENCES ledger_account_types (tenant_id, code)
);
CREATE INDEX ledger_accounts_owner_idx ON ledger_accounts (tenant_id, owner_type, owner_id);

-- Balances: one row per account, changed only by the triggers below (entries, holds,
-- overdraft lines), never by a direct UPDATE. available = credits - debits - pending_debits
-- + overdraft_limit; the CHECK is the last line of defence behind the ledger's own checks.
CREATE TABLE ledger_balances (
  tenant_id       text NOT NULL,
  account_id      uuid NOT NULL,
  currency        char(3) NOT NULL,
  debits_posted   numeric(20,6) NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
  credits_posted  numeric(20,6) NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
  pending_debits  numeric(20,6) NOT NULL DEFAULT 0 CHECK (pending_debits >= 0),
  pending_credits numeric(20,6) NOT NULL DEFAULT 0 CHECK (pending_credits >= 0),
  overdraft_limit numeric(20,6) NOT NULL DEFAULT 0 CHECK (overdraft_limit >= 0),
  debits_must_not_exceed_credits boolean NOT NULL,
  version         bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, account_id),
  FOREIGN KEY (tenant_id, account_id) REFERENCES ledger_accounts (tenant_id, id),
  CONSTRAINT ledger_balances_not_below_line CHECK (
    NOT debits_must_not_exceed_credits
    OR credits_posted - debits_posted - pending_debits + overdraft_limit >= 0)
);

-- Transaction types (SPEC 2: "with a two-factor requirement flag").
CREATE TABLE ledger_transaction_types (
  tenant_id           text NOT NULL REFERENCES tenants (id),
  code                text NOT NULL CHECK (code ~ '^[A-Z][A-Z0-9_]{1,39}$'),
  description         text NOT NULL,
  requires_two_factor boolean NOT NULL DEFAULT false,
  PRIMARY KEY (tenant_id, code)
);

-- Domain transactions with their status history (SPEC 3: PENDING, POSTED, FAILED).
CREATE TABLE ledger_transactions (
  tenant_id  text NOT NULL,
  id         uuid NOT NULL,
  type_code  text NOT NULL,
  status     text NOT NULL CHECK (status IN ('PENDING', 'POSTED', 'FAILED')),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE TABLE ledger_transaction_history (
  tenant_id      text NOT NULL,
  transaction_id uuid NOT NULL,
  seq            bigint GENERATED ALWAYS AS IDENTITY,
  from_status    text,
  to_status      text NOT NULL,
  reason         text,
  at             timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, transaction_id, seq)
);

-- Ledger postings (header). A posting is reversed at most once: reverses_posting_id is unique.
CREATE TABLE ledger_postings (
  tenant_id           text NOT NULL,
  id                  uuid NOT NULL,
  transaction_id      uuid NOT NULL,
  type_code           text NOT NULL,
  kind                text NOT NULL CHECK (kind IN ('posting', 'reversal', 'capture')),
  currency            char(3) NOT NULL,
  entry_count         smallint NOT NULL CHECK (entry_count >= 2),
  description         text,
  metadata            jsonb NOT NULL DEFAULT '{}'::jsonb,
  reverses_posting_id uuid,
  hold_id             uuid,
  created_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  UNIQUE (tenant_id, reverses_posting_id)
);

-- Entries: side, account, amount; never updated or deleted. (posting_id, leg) is the key and
-- every leg of a posting arrives in one INSERT, checked complete and balanced by the trigger.
CREATE TABLE ledger_entries (
  tenant_id  text NOT NULL,
  posting_id uuid NOT NULL,
  leg        smallint NOT NULL CHECK (leg >= 1),
  account_id uuid NOT NULL,
  side       text NOT NULL CHECK (side IN ('debit', 'credit')),
  amount     numeric(20,6) NOT NULL CHECK (amount > 0),
  currency   char(3) NOT NULL,
  seq        bigint GENERATED ALWAYS AS IDENTITY,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, posting_id, leg),
  FOREIGN KEY (tenant_id, posting_id) REFERENCES ledger_postings (tenant_id, id),
  FOREIGN KEY (tenant_id, account_id) REFERENCES ledger_accounts (tenant_id, id)
);
CREATE INDEX ledger_entries_account_idx ON ledger_entries (tenant_id, account_id, seq);

-- Holds (pending transfers): amount reserved on the debit account until captured, voided
-- or expired. Only pending holds count in the balance's pending_* columns.
CREATE TABLE ledger_holds (
  tenant_id         text NOT NULL,
  id                uuid NOT NULL,
  transaction_id    uuid NOT NULL,
  debit_account_id  uuid NOT NULL,
  credit_account_id uuid NOT NULL,
  currency          char(3) NOT NULL,
  amount            numeric(20,6) NOT NULL CHECK (amount > 0),
  captured_amount   numeric(20,6) CHECK (captured_amount > 0 AND captured_amount <= amount),
  status            text NOT NULL CHECK (status IN ('pending', 'captured', 'voided', 'expired')),
  capture_posting_id uuid,
  description       text,
  metadata          jsonb NOT NULL DEFAULT '{}'::jsonb,
  expires_at        timestamptz NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, debit_account_id) REFERENCES ledger_accounts (tenant_id, id),
  FOREIGN KEY (tenant_id, credit_account_id) REFERENCES ledger_accounts (tenant_id, id),
  CHECK (debit_account_id <> credit_account_id),
  CHECK ((status = 'captured') = (captured_amount IS NOT NULL))
);
CREATE INDEX ledger_holds_expiry_idx ON ledger_holds (expires_at) WHERE status = 'pending';
CREATE INDEX ledger_holds_account_idx ON ledger_holds (tenant_id, debit_account_id) WHERE status = 'pending';

-- Overdraft lines (SPEC names OverdraftLine): at most one active line per account.
CREATE TABLE ledger_overdraft_lines (
  tenant_id  text NOT NULL,
  id         uuid NOT NULL,
  account_id uuid NOT NULL,
  limit_amount numeric(20,6) NOT NULL CHECK (limit_amount > 0),
  status     text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
  created_at timestamptz NOT NULL DEFAULT now(),
  closed_at  timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, account_id) REFERENCES ledger_accounts (tenant_id, id)
);
CREATE UNIQUE INDEX ledger_overdraft_lines_active_idx ON ledger_overdraft_lines (tenant_id, account_id) WHERE status = 'active';

-- Savings products (SPEC names SavingsProduct).
CREATE TABLE ledger_savings_products (
  tenant_id         text NOT NULL REFERENCES tenants (id),
  code              text NOT NULL CHECK (code ~ '^[A-Z][A-Z0-9_]{1,39}$'),
  name              text NOT NULL,
  currency          char(3) NOT NULL,
  interest_rate_bps integer NOT NULL CHECK (interest_rate_bps BETWEEN 0 AND 10000),
  min_balance       numeric(20,6) NOT NULL DEFAULT 0 CHECK (min_balance >= 0),
  status            text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'retired')),
  created_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, code)
);

-- Limit schedule rows (SPEC 2.11 schedule kind LIMIT; the admin API will manage them).
-- period 'transaction' is the single-transaction maximum.
CREATE TABLE ledger_limit_rows (
  tenant_id    text NOT NULL REFERENCES tenants (id),
  product_code text NOT NULL,
  action       text NOT NULL,
  currency     char(3) NOT NULL,
  period       text NOT NULL CHECK (period IN ('transaction', 'day', 'month')),
  max_amount   numeric(20,6) CHECK (max_amount > 0),
  max_count    integer CHECK (max_count > 0),
  active       boolean NOT NULL DEFAULT true,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, product_code, action, currency, period),
  CHECK (max_amount IS NOT NULL OR max_count IS NOT NULL)
);

-- Idempotency keys (SPEC 2.11 "key, method, path, hash, stored response snapshot"). Generic:
-- any route may use it (core/idempotency). A row is written in the same transaction as the
-- effect it records, so a committed key always has its response.
CREATE TABLE idempotency_keys (
  tenant_id       text NOT NULL,
  key             text NOT NULL,
  method          text NOT NULL,
  path            text NOT NULL,
  request_hash    text NOT NULL,
  response_status integer,
  response_body   text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- OAuth 2.0 client credentials (SPEC 5.1). Secrets are stored as SHA-256 of a 256-bit random
-- secret (high entropy, so a slow KDF adds cost without adding safety).
CREATE TABLE oauth_clients (
  tenant_id   text NOT NULL REFERENCES tenants (id),
  client_id   text PRIMARY KEY,
  secret_hash bytea NOT NULL,
  scopes      text[] NOT NULL,
  name        text NOT NULL DEFAULT '',
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE INDEX oauth_clients_tenant_idx ON oauth_clients (tenant_id);
