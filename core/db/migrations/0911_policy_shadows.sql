-- Issue 22 item 3: a tenant's candidate loaded as shadow on the edges. Each edge evaluates the
-- tenant's live decisions against it in a worker thread after the real answer, counts
-- divergences in metrics and writes a sample of them here (inputs scrubbed as in decision_inputs).
CREATE TABLE policy_shadows (
  tenant_id     text PRIMARY KEY REFERENCES tenants(id),
  candidate_ref text NOT NULL,
  set_by        text NOT NULL,
  set_at        timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (tenant_id, candidate_ref) REFERENCES policy_candidates (tenant_id, ref)
);

CREATE TABLE policy_shadow_divergences (
  id            bigserial PRIMARY KEY,
  tenant_id     text NOT NULL,
  candidate_ref text NOT NULL,
  recorded_at   timestamptz NOT NULL DEFAULT now(),
  decision_id   text NOT NULL,
  purpose       text NOT NULL,
  route         text NOT NULL,
  live_allow    boolean NOT NULL,
  -- NULL: the shadow bundle produced no decision (it threw).
  shadow_allow  boolean,
  shadow_code   text NOT NULL,
  input         jsonb NOT NULL
);
CREATE INDEX policy_shadow_divergences_tenant_idx ON policy_shadow_divergences (tenant_id, candidate_ref, id);
