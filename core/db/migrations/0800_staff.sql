-- Staff identity (issue 14): the people who run the platform, provisioned by the operator's
-- identity provider over SCIM 2.0. A staff member is subject_type 'user' in sessions and
-- `staff:<id>` in audit records.
CREATE TABLE staff_users (
  tenant_id    text NOT NULL REFERENCES tenants(id),
  id           uuid NOT NULL,
  user_name    text NOT NULL,
  external_id  text,
  display_name text,
  -- The SCIM resource's other attributes (name, emails, ...) as last written, for GET.
  attributes   jsonb NOT NULL DEFAULT '{}',
  active       boolean NOT NULL DEFAULT true,
  -- Bumped on every change: the SCIM ETag is W/"<version>".
  version      integer NOT NULL DEFAULT 1,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  -- SCIM DELETE keeps a tombstone so `staff:<id>` in old audit records still resolves.
  deleted_at   timestamptz,
  PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX staff_users_id_idx ON staff_users (id);
CREATE UNIQUE INDEX staff_users_user_name_idx ON staff_users (tenant_id, lower(user_name)) WHERE deleted_at IS NULL;

-- Role membership (SCIM Groups are the six roles; DESIGN "People and machines").
CREATE TABLE staff_user_roles (
  tenant_id text NOT NULL,
  user_id   uuid NOT NULL,
  role      text NOT NULL,
  PRIMARY KEY (tenant_id, user_id, role),
  FOREIGN KEY (tenant_id, user_id) REFERENCES staff_users (tenant_id, id)
);

-- A tenant's identity-provider group names mapped onto roles (SCIM groups, ID-token groups).
CREATE TABLE staff_group_mappings (
  tenant_id  text NOT NULL REFERENCES tenants(id),
  idp_group  text NOT NULL,
  role       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, idp_group, role)
);

-- The edge drops a cached staff member when the row or its roles change (deprovisioning).
CREATE FUNCTION notify_staff_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r jsonb := to_jsonb(COALESCE(NEW, OLD));
BEGIN
  PERFORM pg_notify('staff_changed', json_build_object('tenantId', r ->> 'tenant_id',
    'userId', COALESCE(r ->> 'user_id', r ->> 'id'))::text);
  RETURN NULL;
END $$;
CREATE TRIGGER staff_users_changed AFTER INSERT OR UPDATE OR DELETE ON staff_users
  FOR EACH ROW EXECUTE FUNCTION notify_staff_change();
CREATE TRIGGER staff_user_roles_changed AFTER INSERT OR UPDATE OR DELETE ON staff_user_roles
  FOR EACH ROW EXECUTE FUNCTION notify_staff_change();
