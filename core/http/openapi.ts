/**
 * The OpenAPI 3.1 document, generated from the same route objects (and TypeBox schemas) that
 * validate requests, so the description cannot drift from the behaviour.
 */
import type { TSchema } from '@sinclair/typebox';
import type { RouteSpec } from './route.ts';

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

const coreError = {
  type: 'object',
  required: ['code', 'message'],
  properties: { code: { type: 'string' }, message: { type: 'string' } },
};
const problem = {
  type: 'object',
  required: ['type', 'title', 'status'],
  properties: {
    type: { type: 'string' }, title: { type: 'string' }, status: { type: 'integer' },
    detail: { type: 'string' }, instance: { type: 'string' }, code: { type: 'string' },
  },
};

function operationOf(route: RouteSpec): Json {
  const responses: Json = {};
  for (const [status, r] of Object.entries(route.responses)) {
    const entry: Json = { description: r.description };
    if (r.schema) entry.content = { [r.contentType ?? 'application/json']: { schema: plain(r.schema) } };
    else if (r.contentType) entry.content = { [r.contentType]: {} };
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
    paths,
    components: {
      schemas: { Error: coreError, Problem: problem },
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
    },
  };
}
