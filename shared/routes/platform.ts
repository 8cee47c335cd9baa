/** Platform probes, metrics and the API docs (SPEC 9): public, purpose operational. */
import { operationalPurpose, type RouteDeclaration } from './types.ts';

const platform = (method: string, template: string): RouteDeclaration => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'platform',
  action: 'platform.read',
  credential: 'public',
});

export const platformRoutes: RouteDeclaration[] = [
  platform('GET', '/v1/health'),
  platform('GET', '/v1/ready'),
  platform('GET', '/v1/metrics'),
  platform('GET', '/v1/version'),
  platform('GET', '/v1/openapi.json'),
  platform('GET', '/v1/docs'),
  platform('GET', '/v1/docs/{asset}'),
];
