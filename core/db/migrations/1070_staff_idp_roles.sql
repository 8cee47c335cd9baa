-- The roles each member's last federated sign-in gave (issue 16): a mapping removed takes away
-- only a role the member's groups actually gave at that sign-in, never one SCIM or the admin API
-- granted afterwards under a mapping added since (an added mapping counts from the next sign-in).
-- A role the removal takes is dropped from it. NULL where no sign-in recorded it (before this
-- migration, or no groups claim): the removal then judges by the recorded groups alone.
-- Not a SCIM attribute: writing it bumps neither version nor updated_at.
ALTER TABLE staff_users ADD COLUMN idp_roles text[];
