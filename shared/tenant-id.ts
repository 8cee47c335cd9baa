/** The tenant id: one definition for core's schemas and the edge's checks of untrusted text. */
import { Type } from '@sinclair/typebox';

export const TenantId = Type.String({ pattern: '^[a-z0-9][a-z0-9-]{1,62}$', description: 'Tenant id' });
/** The same pattern as a RegExp, for the edge's checks outside a schema. */
export const tenantIdPattern = new RegExp(TenantId.pattern as string);
