-- The edge decides cross-tenant management by relationship tuple (policy: owner_actions): each
-- admin_tenant_owners row is also `tenant:<owner> owner tenant:<created>`. New rows are written
-- by POST /v1/tenants in the same transaction; this copies the existing ones.
INSERT INTO relationship_tuples (tenant_id, subject_ns, subject_id, relation, object_ns, object_id)
SELECT owner_tenant_id, 'tenant', owner_tenant_id, 'owner', 'tenant', tenant_id FROM admin_tenant_owners
ON CONFLICT DO NOTHING;
