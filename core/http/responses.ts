/**
 * What a route may answer (issue 15 item 4): the responses it declares, plus the error statuses
 * every route can meet, declared once here in the route's error format (SPEC 2.2 `{code,
 * message}` or SPEC 7.3 Problem+JSON). The OpenAPI document and the response checker read the
 * same declaration, so what the document promises is what the tests hold core to.
 */
import { Type } from '@sinclair/typebox';
import type { ErrorFormat, ResponseSpec, RouteSpec } from './route.ts';

/** SPEC 2.2: every core error body; extension members (e.g. `errors`) are allowed. */
export const CoreErrorSchema = Type.Object(
  { code: Type.String(), message: Type.String() },
  { additionalProperties: true },
);

/** SPEC 7.3 (RFC 9457): the administration error body; `code` is kept as an extension member. */
export const ProblemSchema = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    instance: Type.String(),
    code: Type.String(),
  },
  { additionalProperties: true },
);

/** RFC 7644 section 3.12: the SCIM error body of the `/scim/v2` routes. */
export const ScimErrorSchema = Type.Object(
  {
    schemas: Type.Array(Type.String()),
    status: Type.String(),
    scimType: Type.Optional(Type.String()),
    detail: Type.String(),
  },
  { additionalProperties: true },
);

/**
 * Every status shared/errors.ts can map an AppError to: the pipeline itself answers 400, 404,
 * 405, 413, 415, 421 (a tenant not resident here, core/residency), 500 and 503 for any route,
 * and the handlers' refusals use the rest.
 */
export const errorStatuses: readonly number[] = [
  400, 401, 403, 404, 405, 409, 412, 413, 415, 421, 422, 428, 429, 500, 502, 503,
];

const errorResponse: Record<ErrorFormat, ResponseSpec> = {
  core: {
    description: 'Error `{code, message}` (SPEC 2.2)',
    schema: CoreErrorSchema,
    contentType: 'application/json',
  },
  problem: {
    description: 'Problem+JSON (SPEC 7.3)',
    schema: ProblemSchema,
    contentType: 'application/problem+json',
  },
  scim: {
    description: 'SCIM error (RFC 7644 section 3.12)',
    schema: ScimErrorSchema,
    contentType: 'application/scim+json',
  },
};

/** The route's own declarations over the generic error responses of its format. */
export function declaredResponses(route: RouteSpec): Record<number, ResponseSpec> {
  const generic = errorResponse[route.errorFormat ?? 'core'];
  return { ...Object.fromEntries(errorStatuses.map((s) => [s, generic])), ...route.responses };
}

/** Statuses that carry no body (RFC 9110): their declaration must not name a schema. */
export const bodilessStatuses: ReadonlySet<number> = new Set([204, 304]);

/** JSON media types: their bodies are described by a TypeBox schema. */
export function isJsonMedia(contentType: string): boolean {
  const media = contentType.split(';')[0]?.trim().toLowerCase() ?? '';
  return media === 'application/json' || media.endsWith('+json');
}

/**
 * The success statuses (below 400) of a route that declare no schema: a JSON (or unnamed)
 * media type without a TypeBox schema, or a bodiless status with one. A non-JSON media type
 * (CSV, HTML, Prometheus text) is its own description.
 */
export function undescribedSuccesses(route: RouteSpec): number[] {
  return Object.entries(route.responses)
    .map(([status, spec]) => [Number(status), spec] as const)
    .filter(([status, spec]) => {
      if (status >= 400) return false;
      if (bodilessStatuses.has(status)) return spec.schema !== undefined;
      return spec.schema === undefined && (spec.contentType === undefined || isJsonMedia(spec.contentType));
    })
    .map(([status]) => status);
}
