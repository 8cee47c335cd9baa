-- Staff sessions keep how the member signed in (issue 14 item 3): a refreshed staff token
-- carries the sign-in's AAL and amr (an identity provider's MFA, a passkey), unlike a
-- customer's, which drops to AAL 1 after a step-up.
ALTER TABLE sessions ADD COLUMN amr text[];
