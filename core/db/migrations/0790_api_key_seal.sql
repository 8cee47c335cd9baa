-- API-key secrets get a sealing key of their own (shared/api-key-secrets.ts): the edge holds it
-- and no longer needs the master key. Rows sealed before carry seal = 1 (master key) until core
-- re-seals them at start-up (core/apikeys/store.ts resealLegacySecrets); the edge reads only 2.
ALTER TABLE api_keys ADD COLUMN seal smallint NOT NULL DEFAULT 1 CHECK (seal IN (1, 2));
ALTER TABLE api_keys ALTER COLUMN seal SET DEFAULT 2;
