/**
 * The OpenAPI 3.1 document, generated from the same route objects (and TypeBox schemas) that
 * validate requests, so the description cannot drift from the behaviour.
 */
import type { TSchema } from '@sinclair/typebox';
import type { RouteSpec } from './route.ts';
import { CoreErrorSchema, declaredResponses, ProblemSchema } from './responses.ts';
import {
  accessNotes,
  credentialHeaders,
  recipes,
  registryFacts,
  securityOf,
  securitySchemes,
  type AccessLookup,
  type ActionFacts,
  type DocCredential,
} from './openapi-security.ts';
import { parameterExample, withExamples, type DocExamples } from './openapi-examples.ts';

/** What the document is built from besides the routes (issue 15 item 3). */
export interface OpenApiOptions {
  version: string;
  /** The edge's route table (the composition root's; core never imports edge/): each operation's credential. */
  access?: AccessLookup;
  /** The current purpose registry document: AAL, request-bound step-ups, API-key scopes. */
  registry?: unknown;
  /** Demo values by parameter or property name (development only). */
  examples?: DocExamples;
}

/** An operation's credential and registry facts; undefined where neither the edge nor the route names one. */
interface OperationAccess {
  credential: DocCredential;
  facts: ActionFacts | undefined;
}

type Json = Record<string, unknown>;

/** TypeBox schemas are JSON Schema; a JSON round-trip drops the library's symbol keys. */
function plain(schema: TSchema): Json {
  return JSON.parse(JSON.stringify(schema)) as Json;
}

function parametersOf(
  route: RouteSpec,
  access: OperationAccess | undefined,
  secured: boolean,
  examples: DocExamples,
): Json[] {
  const out: Json[] = [];
  const add = (where: 'path' | 'query', schema: TSchema | undefined) => {
    if (!schema) return;
    const s = plain(schema);
    const props = (s.properties ?? {}) as Record<string, Json>;
    const required = new Set((s.required ?? []) as string[]);
    for (const [name, prop] of Object.entries(props)) {
      const example = parameterExample(name, prop, examples);
      out.push({
        name,
        in: where,
        required: where === 'path' || required.has(name),
        schema: prop,
        ...(example !== undefined ? { example } : {}),
      });
    }
  };
  add('path', route.params);
  add('query', route.query);
  const declared = new Set((route.headers ?? []).map((h) => h.name.toLowerCase()));
  const implied = access
    ? credentialHeaders(access.credential).filter((h) => !declared.has(h.name.toLowerCase()))
    : [];
  for (const h of [...(route.headers ?? []), ...implied]) {
    // A security scheme sends Authorization (Swagger UI ignores an Authorization header parameter).
    if (secured && h.name.toLowerCase() === 'authorization') continue;
    const example = parameterExample(h.name, { type: 'string' }, examples);
    out.push({
      name: h.name,
      in: 'header',
      required: h.required,
      description: h.description,
      schema: { type: 'string' },
      ...(example !== undefined ? { example } : {}),
    });
  }
  return out;
}

/** The route's own credential (verified by core itself), else the edge's for this route. */
function accessOf(
  route: RouteSpec,
  opts: OpenApiOptions,
  facts: ReturnType<typeof registryFacts>,
): OperationAccess | undefined {
  const edge = opts.access?.(route.method, route.path);
  const credential = route.credential ?? edge?.credential;
  if (!credential) return undefined;
  return { credential, facts: edge ? facts(edge.purpose, edge.action) : undefined };
}

/** The summary's detail: the route's own description, then what Swagger UI cannot do for the caller. */
function descriptionOf(route: RouteSpec, access: OperationAccess | undefined): string | undefined {
  const intentSigned = (route.headers ?? []).some((h) => h.name.toLowerCase() === 'x-intent-signature');
  const notes = access ? accessNotes(access.credential, access.facts, intentSigned) : [];
  const parts = [route.description, ...notes].filter(
    (p): p is string => typeof p === 'string' && p.length > 0,
  );
  return parts.length > 0 ? parts.join('\n\n') : undefined;
}

/** The two error bodies are components, referenced by every operation rather than repeated. */
function schemaOrRef(schema: TSchema): Json {
  if (schema === CoreErrorSchema) return { $ref: '#/components/schemas/Error' };
  if (schema === ProblemSchema) return { $ref: '#/components/schemas/Problem' };
  return plain(schema);
}

function operationOf(route: RouteSpec, access: OperationAccess | undefined, examples: DocExamples): Json {
  const responses: Json = {};
  // Every status the route can answer, errors in its own format and media type (issue 15 item 4).
  for (const [status, r] of Object.entries(declaredResponses(route))) {
    const entry: Json = { description: r.description };
    if (r.schema)
      entry.content = { [r.contentType ?? 'application/json']: { schema: schemaOrRef(r.schema) } };
    else if (r.contentType) entry.content = { [r.contentType]: {} };
    for (const alt of r.alternatives ?? [])
      entry.content = { ...(entry.content as Json | undefined), [alt]: { schema: { type: 'string' } } };
    responses[status] = entry;
  }
  responses.default = {
    description: 'Error',
    content:
      route.errorFormat === 'problem'
        ? { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } }
        : route.errorFormat === 'scim'
          ? {
              'application/scim+json': {
                schema: { type: 'object', description: 'SCIM error (RFC 7644 section 3.12)' },
              },
            }
          : { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
  };
  const security = access ? securityOf(access.credential, access.facts) : undefined;
  const description = descriptionOf(route, access);
  const op: Json = {
    operationId: route.operationId,
    summary: route.summary,
    ...(description ? { description } : {}),
    tags: route.tags,
    parameters: parametersOf(route, access, security !== undefined, examples),
    responses,
    ...(security ? { security } : {}),
  };
  if (route.bodyKind === 'raw' && route.rawBody) {
    const { contentType, schema, also } = route.rawBody;
    const media = { schema: withExamples(structuredClone(schema), examples) };
    op.requestBody = {
      required: true,
      content: Object.fromEntries([contentType, ...(also ?? [])].map((type) => [type, media])),
    };
  }
  if (route.body) {
    const media = route.bodyKind === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
    op.requestBody = {
      required: true,
      content: { [media]: { schema: withExamples(plain(route.body), examples) } },
    };
  }
  return op;
}

/**
 * Interfaces inside the one document that carry their own version: SPEC 9.2 fixes the customer
 * authentication interface at 1.0.0 (issue 15 item 8), independent of the build's version.
 */
export const interfaceVersions: Readonly<Record<string, string>> = { 'customer-auth': '1.0.0' };

/** The document's introduction: how to authorize on this page (README.md#docs-page). */
const introduction = [
  'Every request reaches core through the edge policy gateway (Envoy ext_authz), which verifies the credential each operation names under **Authorize**.',
  'A customer token in development: `POST /customers/auth/login` with `{tenantId, phone, pin}` of the `customer` in `DATA_DIR/demo.json`, then paste `accessToken` into `customerBearer`.',
  'Core OAuth clients: `POST /oauth2/token` with demo.json `coreClient`; staff tooling: a `serviceTokens` entry; agents: the demo `agent` (a device proof, see the README).',
  `Signed API-key requests, DPoP proofs, request-bound step-ups and intent signatures cannot be made from this page: the operations that need them say so and point to the README recipe (${recipes.docs}).`,
].join('\n\n');

export function buildOpenApi(routes: RouteSpec[], opts: OpenApiOptions): Json {
  const paths: Record<string, Json> = {};
  const facts = registryFacts(opts.registry);
  const examples = opts.examples ?? {};
  for (const route of routes) {
    if (route.hidden) continue;
    const item = (paths[route.path] ??= {});
    item[route.method.toLowerCase()] = operationOf(route, accessOf(route, opts, facts), examples);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Payments platform core API',
      version: opts.version,
      description: introduction,
    },
    servers: [{ url: '/' }],
    tags: Object.entries(interfaceVersions).map(([name, version]) => ({
      name,
      description: `Interface version ${version} (SPEC 9.2)`,
      'x-interface-version': version,
    })),
    paths,
    components: {
      schemas: { Error: plain(CoreErrorSchema), Problem: plain(ProblemSchema) },
      securitySchemes,
    },
  };
}
