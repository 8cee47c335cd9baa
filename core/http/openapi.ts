/**
 * The OpenAPI 3.1 document, generated from the same route objects (and TypeBox schemas) that
 * validate requests, so the description cannot drift from the behaviour.
 */
import type { TSchema } from '@sinclair/typebox';
import type { RouteSpec } from './route.ts';
import { CoreErrorSchema, declaredResponses, ProblemSchema } from './responses.ts';

type Json = Record<string, unknown>;

/** TypeBox schemas are JSON Schema; a JSON round-trip drops the library's symbol keys. */
function plain(schema: TSchema): Json {
  return JSON.parse(JSON.stringify(schema)) as Json;
}

function parametersOf(route: RouteSpec): Json[] {
  const out: Json[] = [];
  const add = (where: 'path' | 'query', schema: TSchema | undefined) => {
    if (!schema) return;
    const s = plain(schema);
    const props = (s.properties ?? {}) as Record<string, Json>;
    const required = new Set((s.required ?? []) as string[]);
    for (const [name, prop] of Object.entries(props)) {
      out.push({ name, in: where, required: where === 'path' || required.has(name), schema: prop });
    }
  };
  add('path', route.params);
  add('query', route.query);
  for (const h of route.headers ?? []) {
    out.push({ name: h.name, in: 'header', required: h.required, description: h.description, schema: { type: 'string' } });
  }
  return out;
}

/** The two error bodies are components, referenced by every operation rather than repeated. */
function schemaOrRef(schema: TSchema): Json {
  if (schema === CoreErrorSchema) return { $ref: '#/components/schemas/Error' };
  if (schema === ProblemSchema) return { $ref: '#/components/schemas/Problem' };
  return plain(schema);
}

function operationOf(route: RouteSpec): Json {
  const responses: Json = {};
  // Every status the route can answer, errors in its own format and media type (issue 15 item 4).
  for (const [status, r] of Object.entries(declaredResponses(route))) {
    const entry: Json = { description: r.description };
    if (r.schema) entry.content = { [r.contentType ?? 'application/json']: { schema: schemaOrRef(r.schema) } };
    else if (r.contentType) entry.content = { [r.contentType]: {} };
    for (const alt of r.alternatives ?? []) entry.content = { ...(entry.content as Json | undefined), [alt]: { schema: { type: 'string' } } };
    responses[status] = entry;
  }
  responses.default = {
    description: 'Error',
    content: route.errorFormat === 'problem'
      ? { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } }
      : route.errorFormat === 'scim'
        ? { 'application/scim+json': { schema: { type: 'object', description: 'SCIM error (RFC 7644 section 3.12)' } } }
        : { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
  };
  const op: Json = {
    operationId: route.operationId,
    summary: route.summary,
    tags: route.tags,
    parameters: parametersOf(route),
    responses,
  };
  if (route.bodyKind === 'raw' && route.rawBody) {
    op.requestBody = { required: true, content: { [route.rawBody.contentType]: { schema: route.rawBody.schema } } };
  }
  if (route.body) {
    const media = route.bodyKind === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
    op.requestBody = { required: true, content: { [media]: { schema: plain(route.body) } } };
  }
  return op;
}

/**
 * Interfaces inside the one document that carry their own version: SPEC 9.2 fixes the customer
 * authentication interface at 1.0.0 (issue 15 item 8), independent of the build's version.
 */
export const interfaceVersions: Readonly<Record<string, string>> = { 'customer-auth': '1.0.0' };

export function buildOpenApi(routes: RouteSpec[], info: { version: string }): Json {
  const paths: Record<string, Json> = {};
  for (const route of routes) {
    if (route.hidden) continue;
    const item = (paths[route.path] ??= {});
    item[route.method.toLowerCase()] = operationOf(route);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Payments platform core API',
      version: info.version,
      description: 'Every request reaches core through the edge policy gateway (Envoy ext_authz).',
    },
    servers: [{ url: '/' }],
    tags: Object.entries(interfaceVersions).map(([name, version]) => ({
      name, description: `Interface version ${version} (SPEC 9.2)`, 'x-interface-version': version,
    })),
    paths,
    components: {
      schemas: { Error: plain(CoreErrorSchema), Problem: plain(ProblemSchema) },
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
    },
  };
}
