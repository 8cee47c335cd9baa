-- Housekeeping (core/housekeeping/prune.ts) deletes one-time values and counters once they can
-- no longer matter; these indexes let it find them without scanning the tables.
CREATE INDEX used_challenges_expiry_idx ON used_challenges (expires_at);
CREATE INDEX otp_codes_expiry_idx ON otp_codes (expires_at);
CREATE INDEX phone_verifications_expiry_idx ON phone_verifications (expires_at);
CREATE INDEX refresh_tokens_expiry_idx ON refresh_tokens (expires_at);
CREATE INDEX auth_throttle_window_idx ON auth_throttle (window_start) WHERE NOT needs_otp;
