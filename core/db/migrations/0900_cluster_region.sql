-- Issue 20 item 2 (SPEC 2.10 `resident_regions` as data placement): the database cluster says
-- where it is, and a tenant's data is created only on a cluster in one of its resident regions.

-- One row: this cluster's region (ISO 3166 alpha-2, the same codes as resident_regions).
-- Written once by the first `npm run migrate` (or development core) with DEPLOYMENT_REGION;
-- relabelling is an operator's deliberate UPDATE (README "Where a tenant's data lives").
CREATE TABLE cluster_identity (
  singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  region      char(2) NOT NULL CHECK (region ~ '^[A-Z]{2}$'),
  labelled_by text NOT NULL,
  labelled_at timestamptz NOT NULL DEFAULT now()
);

-- A relabelled cluster may no longer hold some tenants: every core drops its cached placement
-- (empty payload = drop all) and re-checks. The label can change, never disappear.
CREATE FUNCTION cluster_identity_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'the cluster region label cannot be removed (UPDATE it to relabel)' USING ERRCODE = 'RS002';
  END IF;
  PERFORM pg_notify('tenants_changed', '');
  RETURN NULL;
END $$;
CREATE TRIGGER cluster_identity_changed AFTER UPDATE OR DELETE ON cluster_identity
  FOR EACH ROW EXECUTE FUNCTION cluster_identity_changed();

-- Backstop under every writer (tenant creation, the security settings API, an operator's SQL):
-- a tenant row whose resident_regions is set, or changed, must name this cluster's region.
-- Absent (or JSON null) means the tenant set no restriction. SQLSTATE RS001 is answered 422
-- RESIDENCY_REGION_MISMATCH (shared/errors.ts asAppError).
CREATE FUNCTION tenant_residency_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_regions jsonb := NEW.security -> 'resident_regions';
  v_here text;
BEGIN
  IF v_regions IS NULL OR jsonb_typeof(v_regions) = 'null' THEN RETURN NEW; END IF;
  IF TG_OP = 'UPDATE' AND (OLD.security -> 'resident_regions') IS NOT DISTINCT FROM v_regions THEN RETURN NEW; END IF;
  IF jsonb_typeof(v_regions) <> 'array' THEN
    RAISE EXCEPTION 'resident_regions must be an array of country codes' USING ERRCODE = 'RS001';
  END IF;
  -- FOR SHARE: a relabel waits for this transaction, so it cannot slip between check and commit.
  SELECT region INTO v_here FROM cluster_identity FOR SHARE;
  IF v_here IS NULL THEN
    RAISE EXCEPTION 'this database cluster has no region label, so no resident_regions can be checked (run npm run migrate with DEPLOYMENT_REGION)' USING ERRCODE = 'RS001';
  END IF;
  IF NOT (v_regions ? v_here) THEN
    RAISE EXCEPTION 'tenant %: resident_regions % do not include this database cluster''s region %', NEW.id, v_regions::text, v_here USING ERRCODE = 'RS001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER tenant_residency_guard BEFORE INSERT OR UPDATE OF security ON tenants
  FOR EACH ROW EXECUTE FUNCTION tenant_residency_guard();
