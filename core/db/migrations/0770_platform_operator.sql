-- The platform operator (issue 23 item 5): the tenant of the people who run the platform, created
-- once by `npm run bootstrap` (development: the demo tenant). Its Admins are the platform admins,
-- the only ones who may create tenants. One row at most.
CREATE TABLE platform_operator (
  singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  tenant_id  text NOT NULL UNIQUE REFERENCES tenants(id),
  created_at timestamptz NOT NULL DEFAULT now()
);
