-- Issue 20 item 1: fee and limit schedule templates the platform publishes and any tenant's
-- Admin copies into its own tenant (POST /v1/schedule-templates/{id}:copy). Platform-wide
-- reference data, like admin_countries: no tenant_id; only the operator tenant's Admins write.
CREATE TABLE schedule_templates (
  id           uuid PRIMARY KEY,
  name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
  kind         text NOT NULL CHECK (kind IN ('FEE', 'LIMIT', 'COMMISSION')),
  product      text NOT NULL,
  currency     char(3) NOT NULL,
  -- The items exactly as published (validated by the schedule rules at publication).
  items        jsonb NOT NULL,
  published_by text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (name, kind, product, currency)
);
