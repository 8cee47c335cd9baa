-- Issue 20 item 3: the edge tells the policy whether a request's tenant is the platform
-- operator's (tenant.platform: the policy's `parent` view is the operator's only). It caches
-- that with the tenant row, so marking the operator (the bootstrap, the development seed) drops
-- the cached tenant like any change of the tenant itself.
CREATE TRIGGER platform_operator_changed AFTER INSERT OR UPDATE OR DELETE ON platform_operator
  FOR EACH ROW EXECUTE FUNCTION notify_row_change('tenants_changed', 'tenant_id');
