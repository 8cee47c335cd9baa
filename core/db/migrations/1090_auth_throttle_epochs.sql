-- A counted sign-in attempt is taken back when the service fails before answering it
-- (core/identity/throttle.ts settleUnanswered), and a success takes back its own count. Taken
-- back after the counter was reset (a success zeroed the consecutive failures, the window ran out,
-- an OTP verification cleared the day's failures, housekeeping deleted the row), the take-back
-- subtracted an attempt counted after the reset instead. Each count now has an epoch, renewed
-- whenever that count is reset: fails_epoch for the consecutive failures, day_epoch for the day's.
-- An admission records the epochs it counted in; a take-back subtracts from a count only while
-- the count is still in that epoch. Epochs come from one sequence, so a row deleted and made
-- again never repeats one (a per-row counter would start again at the same value).
-- The columns arrive with a constant default (no rewrite of the table, no long lock while logins
-- wait): the rows already there share epoch 0, which no reset ever draws (the sequence starts at 1)
-- and which is compared per row only; rows made from now on draw theirs from the sequence.
CREATE SEQUENCE auth_throttle_epoch;
ALTER TABLE auth_throttle
  ADD COLUMN fails_epoch bigint NOT NULL DEFAULT 0,
  ADD COLUMN day_epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE auth_throttle
  ALTER COLUMN fails_epoch SET DEFAULT nextval('auth_throttle_epoch'),
  ALTER COLUMN day_epoch SET DEFAULT nextval('auth_throttle_epoch');
