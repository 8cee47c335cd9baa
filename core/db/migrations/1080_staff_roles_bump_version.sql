-- A member's roles are part of its SCIM representation (`groups`) and so of its version, the
-- User's ETag: a role granted or taken (SCIM Groups, the admin API, a mapping change, a federated
-- sign-in) bumps staff_users.version, so a client holding the copy without it is never told 304
-- and an If-Match naming it is refused 412. Once per member and transaction: a PUT that also
-- writes the member's row has bumped it already (xmin is this transaction), and a statement
-- touching several roles of one member bumps it once.
CREATE FUNCTION staff_roles_bump_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE staff_users u SET version = u.version + 1
   WHERE (u.tenant_id, u.id) IN (SELECT DISTINCT c.tenant_id, c.user_id FROM changed c)
     AND u.xmin <> pg_current_xact_id()::xid;
  RETURN NULL;
END $$;
CREATE TRIGGER staff_user_roles_bump_on_insert AFTER INSERT ON staff_user_roles
  REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION staff_roles_bump_version();
CREATE TRIGGER staff_user_roles_bump_on_delete AFTER DELETE ON staff_user_roles
  REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION staff_roles_bump_version();
