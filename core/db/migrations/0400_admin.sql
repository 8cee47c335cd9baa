-- Administration and reference API (SPEC 2.11, 3, 4.6; issue 6).
-- Countries and currencies are platform reference data (ISO 3166 / ISO 4217 codes enabled for
-- the platform, with local metadata): the one kind of table here without tenant_id, because
-- every tenant cluster holds the same copy. Everything else is tenant-owned and tenant-scoped.

CREATE TABLE admin_countries (
  code               text PRIMARY KEY CHECK (code ~ '^[A-Z]{2}$'),
  name               text NOT NULL,
  region             text NOT NULL DEFAULT '',
  subregion          text NOT NULL DEFAULT '',
  timezones          text[] NOT NULL DEFAULT '{}',
  locales            text[] NOT NULL DEFAULT '{}',
  metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
  -- mapping (SPEC 4.6 mapping): allowed must include the base (also checked in code)
  base_currency      text CHECK (base_currency ~ '^[A-Z]{3}$'),
  allowed_currencies text[] NOT NULL DEFAULT '{}',
  config_version     integer NOT NULL DEFAULT 0,
  version            integer NOT NULL DEFAULT 1,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  CHECK (base_currency IS NULL OR base_currency = ANY (allowed_currencies))
);

CREATE TABLE admin_currencies (
  code        text PRIMARY KEY CHECK (code ~ '^[A-Z]{3}$'),
  name        text NOT NULL,
  minor_units integer NOT NULL CHECK (minor_units BETWEEN 0 AND 6),
  symbol      text NOT NULL DEFAULT '',
  format      jsonb NOT NULL DEFAULT '{}'::jsonb,
  metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
  version     integer NOT NULL DEFAULT 1,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE admin_environments (
  id         uuid PRIMARY KEY,
  tenant_id  text NOT NULL REFERENCES tenants (id),
  name       text NOT NULL,
  env_type   text NOT NULL CHECK (env_type IN ('STG', 'PRD', 'DEV')),
  flags      jsonb NOT NULL DEFAULT '{}'::jsonb,
  version    integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, name)
);
CREATE INDEX admin_environments_tenant_idx ON admin_environments (tenant_id, created_at, id);

CREATE TABLE admin_products (
  tenant_id  text NOT NULL REFERENCES tenants (id),
  code       text NOT NULL CHECK (code ~ '^[A-Z][A-Z0-9_]{1,39}$'),
  category   text NOT NULL,
  metadata   jsonb NOT NULL DEFAULT '{}'::jsonb,
  status     text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'DEPRECATED')),
  version    integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, code)
);

-- Hierarchical configuration (SPEC 2.11 config version): GLOBAL and COUNTRY rows are platform
-- rows (tenant_id NULL), TENANT and ENVIRONMENT rows belong to one tenant. At most one ACTIVE
-- version per (owner, scope, scope_ref, key).
CREATE TABLE admin_configs (
  id         uuid PRIMARY KEY,
  tenant_id  text REFERENCES tenants (id),
  scope      text NOT NULL CHECK (scope IN ('GLOBAL', 'COUNTRY', 'TENANT', 'ENVIRONMENT')),
  scope_ref  text NOT NULL DEFAULT '',
  key        text NOT NULL CHECK (key ~ '^[a-z][a-z0-9_.-]{0,127}$'),
  value      jsonb NOT NULL,
  version    integer NOT NULL,
  status     text NOT NULL CHECK (status IN ('ACTIVE', 'INACTIVE', 'SUPERSEDED')),
  promoted_from uuid,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CHECK ((scope IN ('GLOBAL', 'COUNTRY')) = (tenant_id IS NULL)),
  CHECK (scope <> 'GLOBAL' OR scope_ref = '')
);
CREATE UNIQUE INDEX admin_configs_version_idx ON admin_configs (coalesce(tenant_id, ''), scope, scope_ref, key, version);
CREATE UNIQUE INDEX admin_configs_active_idx ON admin_configs (coalesce(tenant_id, ''), scope, scope_ref, key) WHERE status = 'ACTIVE';
CREATE INDEX admin_configs_list_idx ON admin_configs (tenant_id, created_at, id);

-- Fee, limit and commission schedules (SPEC 2.11 schedule; SPEC 3: created inactive, DELETE
-- only while not active → archived). Tiered kinds (FEE, COMMISSION) use admin_schedule_tiers,
-- LIMIT uses admin_schedule_limits; a new tiered kind needs only a new value in the CHECK.
CREATE TABLE admin_schedules (
  id            uuid PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants (id),
  kind          text NOT NULL CHECK (kind IN ('FEE', 'LIMIT', 'COMMISSION')),
  product       text NOT NULL,
  currency      text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  scope         text NOT NULL CHECK (scope IN ('TENANT', 'COUNTRY', 'ENVIRONMENT')),
  scope_ref     text NOT NULL,
  name          text NOT NULL DEFAULT '',
  status        text NOT NULL DEFAULT 'INACTIVE' CHECK (status IN ('INACTIVE', 'ACTIVE', 'ARCHIVED')),
  active_from   timestamptz,
  active_to     timestamptz,
  promoted_from uuid,
  version       integer NOT NULL DEFAULT 1,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  CHECK (active_to IS NULL OR active_from IS NULL OR active_to > active_from)
);
CREATE UNIQUE INDEX admin_schedules_active_idx ON admin_schedules (tenant_id, kind, product, currency, scope, scope_ref) WHERE status = 'ACTIVE';
CREATE INDEX admin_schedules_list_idx ON admin_schedules (tenant_id, created_at, id);

-- A tier applies to amounts in [min_amount, max_amount) (max NULL: no upper bound).
-- fee = clamp(fixed + amount × percent_bps / 10 000, fee_min, fee_max), rounded half-up to
-- the currency's minor units.
CREATE TABLE admin_schedule_tiers (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  schedule_id uuid NOT NULL REFERENCES admin_schedules (id),
  min_amount  numeric(20,6) NOT NULL CHECK (min_amount >= 0),
  max_amount  numeric(20,6) CHECK (max_amount IS NULL OR max_amount > min_amount),
  fixed       numeric(20,6) NOT NULL DEFAULT 0 CHECK (fixed >= 0),
  percent_bps integer NOT NULL DEFAULT 0 CHECK (percent_bps BETWEEN 0 AND 10000),
  fee_min     numeric(20,6) CHECK (fee_min >= 0),
  fee_max     numeric(20,6) CHECK (fee_max >= 0),
  created_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (fee_min IS NULL OR fee_max IS NULL OR fee_max >= fee_min)
);
CREATE INDEX admin_schedule_tiers_idx ON admin_schedule_tiers (schedule_id, min_amount);

CREATE TABLE admin_schedule_limits (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  schedule_id uuid NOT NULL REFERENCES admin_schedules (id),
  action      text NOT NULL CHECK (action ~ '^[A-Z][A-Z0-9_]{1,39}$'),
  period      text NOT NULL CHECK (period IN ('transaction', 'day', 'month')),
  max_amount  numeric(20,6) CHECK (max_amount > 0),
  max_count   integer CHECK (max_count > 0),
  kyc_level   text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (max_amount IS NOT NULL OR max_count IS NOT NULL)
);
CREATE INDEX admin_schedule_limits_idx ON admin_schedule_limits (schedule_id, action, period);

-- Feature flags (SPEC 2.11): scopes [{scope, ref}], rollout percentage 0–100 (two decimals).
CREATE TABLE admin_flags (
  tenant_id  text NOT NULL REFERENCES tenants (id),
  key        text NOT NULL CHECK (key ~ '^[a-z][a-z0-9_.-]{0,63}$'),
  enabled    boolean NOT NULL,
  scopes     jsonb NOT NULL DEFAULT '[]'::jsonb,
  rollout    numeric(5,2) CHECK (rollout BETWEEN 0 AND 100),
  version    integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, key)
);

-- Webhook endpoints (SPEC 2.11, 6). Secrets are sealed with the master key (KeyStore.sealSecret);
-- during a rotation the previous secret stays valid until previous_until.
CREATE TABLE admin_webhooks (
  id              uuid PRIMARY KEY,
  tenant_id       text NOT NULL REFERENCES tenants (id),
  url             text NOT NULL CHECK (url ~ '^https?://'),
  events          text[] NOT NULL,
  secret_enc      bytea NOT NULL,
  previous_enc    bytea,
  previous_until  timestamptz,
  status          text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'PAUSED', 'DELETED')),
  version         integer NOT NULL DEFAULT 1,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX admin_webhooks_tenant_idx ON admin_webhooks (tenant_id, created_at, id);

-- One delivery per (outbox event, endpoint). Ordered per (endpoint, aggregate, aggregate_id)
-- by seq: a delivery is attempted only when no earlier one of its aggregate is still PENDING.
CREATE TABLE admin_webhook_deliveries (
  id              uuid PRIMARY KEY,
  seq             bigserial NOT NULL,
  tenant_id       text NOT NULL,
  webhook_id      uuid NOT NULL REFERENCES admin_webhooks (id),
  outbox_id       uuid NOT NULL,
  aggregate_key   text NOT NULL,
  status          text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DELIVERED', 'DEAD')),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  last_status     integer,
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  delivered_at    timestamptz,
  UNIQUE (outbox_id, webhook_id)
);
CREATE INDEX admin_webhook_deliveries_due_idx ON admin_webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX admin_webhook_deliveries_order_idx ON admin_webhook_deliveries (webhook_id, aggregate_key, seq) WHERE status = 'PENDING';

-- The dispatcher marks an outbox row routed once its deliveries exist (additive column).
ALTER TABLE outbox ADD COLUMN routed_at timestamptz;
CREATE INDEX outbox_unrouted_idx ON outbox (created_at, id) WHERE routed_at IS NULL;
