-- Relationship tuples (SPEC 2.7): who relates how to what. The edge loads a subject's tuples
-- into the policy input; `member` of `tenant:<id>` is required for every allow (SPEC 5.2.5).
-- caveat keys: expires_at (RFC 3339), hours ({"from": 8, "to": 18, "tz": "Africa/Nairobi"}),
-- ip_ranges (array of CIDR).
CREATE TABLE relationship_tuples (
  tenant_id  text NOT NULL,
  subject_ns text NOT NULL,
  subject_id text NOT NULL,
  relation   text NOT NULL CHECK (relation IN ('owner', 'admin', 'member', 'editor', 'viewer', 'parent', 'payer')),
  object_ns  text NOT NULL,
  object_id  text NOT NULL,
  caveat     jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (subject_ns, subject_id, relation, object_ns, object_id)
);
CREATE INDEX relationship_tuples_subject_idx ON relationship_tuples (tenant_id, subject_ns, subject_id);

-- Any change is announced so edge caches drop the subject's tuples.
CREATE FUNCTION relationship_tuples_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  r := COALESCE(NEW, OLD);
  PERFORM pg_notify('tuples_changed', json_build_object('tenantId', r.tenant_id, 'subjectNs', r.subject_ns, 'subjectId', r.subject_id)::text);
  RETURN NULL;
END $$;
CREATE TRIGGER relationship_tuples_changed AFTER INSERT OR UPDATE OR DELETE ON relationship_tuples
  FOR EACH ROW EXECUTE FUNCTION relationship_tuples_notify();
