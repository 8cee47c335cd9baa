-- A counted sign-in attempt is taken back when the service fails before answering it
-- (core/identity/throttle.ts settleUnanswered), and a success takes back its own count. Taken
-- back after the counter was reset (a success zeroed the consecutive failures, the window ran out,
-- an OTP verification cleared the day's failures, housekeeping deleted the row), the take-back
-- subtracted an attempt counted after the reset instead. Each count now has an epoch, renewed
-- whenever that count is reset: fails_epoch for the consecutive failures, day_epoch for the day's.
-- An admission records the epochs it counted in; a take-back subtracts from a count only while
-- the count is still in that epoch. Epochs come from one sequence, so a row deleted and made
-- again never repeats one (a per-row counter would start again at the same value).
CREATE SEQUENCE auth_throttle_epoch;
ALTER TABLE auth_throttle
  ADD COLUMN fails_epoch bigint NOT NULL DEFAULT nextval('auth_throttle_epoch'),
  ADD COLUMN day_epoch bigint NOT NULL DEFAULT nextval('auth_throttle_epoch');
