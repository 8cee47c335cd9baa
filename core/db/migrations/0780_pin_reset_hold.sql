-- A PIN replaced through phone verification alone authorises no money until this time
-- (issue 13 item 1: a SIM swap hands the attacker the OTPs, and a PIN change changes who can
-- authorise money). Set by pin/set when it replaces an existing PIN, to the reset time plus the
-- tenant's device_cooloff_hours; NULL after a first enrolment. Read by USSD money operations
-- and by step-up completion (core/identity/pin-hold.ts).
ALTER TABLE credentials ADD COLUMN pin_reset_hold_until timestamptz;
