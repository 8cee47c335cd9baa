-- Tenants: the unit of isolation. Every other table carries tenant_id referring here.
CREATE TABLE tenants (
  id            text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9-]{1,62}$'),
  name          text NOT NULL,
  country       char(2) NOT NULL CHECK (country ~ '^[A-Z]{2}$'),
  base_currency char(3) NOT NULL CHECK (base_currency ~ '^[A-Z]{3}$'),
  status        text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'SUSPENDED')),
  -- SPEC 2.10 tenant security settings
  security      jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
