-- Migration 1080's "bumped already" test read xmin, which is wrong twice: a write of the row that
-- does not bump (idp_groups, idp_roles) made a later role change skip its bump, and a write under
-- a savepoint (every SCIM write of a member) carries the subtransaction's id, so a role change
-- after it bumped a second time. The transaction that bumped is now recorded in the row
-- (pg_current_xact_id() is the top-level id, inside savepoints too): role changes bump a member
-- once per transaction, and not at all after a write of the member that bumped it
-- (updateStaffUser sets the marker too). The bump also moves updated_at (meta.lastModified),
-- strictly forward, so a SCIM client syncing by `meta.lastModified gt` sees the member again.
ALTER TABLE staff_users ADD COLUMN roles_bumped_in xid8;

CREATE OR REPLACE FUNCTION staff_roles_bump_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE staff_users u
     SET version = u.version + 1,
         updated_at = greatest(now(), u.updated_at + interval '1 millisecond'),
         roles_bumped_in = pg_current_xact_id()
   WHERE (u.tenant_id, u.id) IN (SELECT DISTINCT c.tenant_id, c.user_id FROM changed c)
     AND u.roles_bumped_in IS DISTINCT FROM pg_current_xact_id();
  RETURN NULL;
END $$;
