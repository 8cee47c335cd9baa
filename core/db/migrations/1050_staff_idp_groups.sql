-- The identity-provider groups of each member's last federated sign-in (issue 16: a mapping
-- removed or changed takes away the roles it gave at once, not at the member's next sign-in).
-- NULL for a member never signed in through a provider whose ID token carried the groups claim.
-- Not a SCIM attribute: writing it bumps neither version nor updated_at.
ALTER TABLE staff_users ADD COLUMN idp_groups text[];
