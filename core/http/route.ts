/**
 * A route is a plain object: method, OpenAPI path template, TypeBox schemas and a handler
 * whose argument types are derived from those schemas. The same objects drive request
 * validation and the OpenAPI document; method, path, roles, money movement and error format come
 * from the route's declaration (`...declared(method, path)`, core/http/declared.ts).
 */
import type { IncomingMessage } from 'node:http';
import type { Static, TSchema } from '@sinclair/typebox';
import type { Logger } from 'pino';
import type { MoneyMovement } from '../../shared/api-key-budget.ts';
import type { DocCredential } from './openapi-security.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** How the request body is read. `none` refuses a body; `json` is the default for writes. */
export type BodyKind = 'none' | 'json' | 'form' | 'raw';
/** How deep a JSON body may nest its containers and how many commas it may hold outside strings. */
export interface JsonBodyStructure {
  maxDepth: number;
  maxCommas: number;
}

/** Which error body a route answers with: core `{code, message}`, Problem+JSON or a SCIM error. */
export type { ErrorFormat } from '../../shared/errors.ts';
import type { ErrorFormat } from '../../shared/errors.ts';

export interface ResponseSpec {
  description: string;
  schema?: TSchema;
  /** Defaults to application/json when a schema is given. */
  contentType?: string;
  /** Other, non-JSON media types the same status may carry when the client asks (e.g. `text/csv` on Accept). */
  alternatives?: string[];
}

/** Identity the edge established for this request (SPEC 5.2 identity headers). */
export interface EdgeIdentity {
  tenantId: string | undefined;
  principalId: string | undefined;
  sessionId: string | undefined;
  purpose: string | undefined;
  aal: number | undefined;
  clientIp: string | undefined;
  deviceId: string | undefined;
  /** Staff and service roles (x-roles), e.g. ops, admin. */
  roles: string[];
  /** Machine-client scopes (x-scopes). */
  scopes: string[];
  /** How a service principal proved itself (x-credential): `api-key`, `core-client` or `service-token`. */
  credential: string | undefined;
  /** What the edge counted against the API key's amount budget for this request (x-budget-counted). */
  budgetCounted: string | undefined;
  /** scheme://host the client addressed (x-public-origin): the URL a DPoP proof names (issue 17). */
  publicOrigin: string | undefined;
  /** The client certificate Envoy verified, URL-encoded PEM (x-client-certificate; RFC 8705). */
  clientCertificate: string | undefined;
  /** True only when this request carried the edge shared secret (current or previous): the headers above are the edge's. */
  fromEdge: boolean;
}

export interface RequestContext<P, Q, B> {
  readonly req: IncomingMessage;
  readonly method: Method;
  /** Path without the query string. */
  readonly path: string;
  readonly template: string;
  readonly params: P;
  readonly query: Q;
  readonly body: B;
  readonly rawBody: Buffer;
  /** Lower-cased header names; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>;
  readonly requestId: string;
  readonly log: Logger;
  readonly identity: EdgeIdentity;
  /** The roles the route's declaration allows (shared/routes/; empty when it names none): what core checks again. */
  readonly routeRoles: readonly string[];
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** A non-JSON body (CSV, HTML, plain text, static files). */
  raw?: { contentType: string; data: string | Buffer };
}

export interface RouteSpec<
  P extends TSchema = TSchema,
  Q extends TSchema = TSchema,
  B extends TSchema = TSchema,
> {
  method: Method;
  path: string;
  operationId: string;
  summary: string;
  /** Longer text for the OpenAPI document (Markdown), before the access notes it gains there. */
  description?: string;
  tags: string[];
  /**
   * The credential core verifies itself on a route the edge passes as `public` (staff passkeys,
   * sessions, sign-out): the OpenAPI document's security for it. Elsewhere the edge's route table says.
   */
  credential?: DocCredential;
  params?: P;
  query?: Q;
  body?: B;
  bodyKind?: BodyKind;
  bodyLimitBytes?: number;
  /** A JSON body nesting or listing more than this is refused (400) before it is parsed (body.ts). */
  bodyStructure?: JsonBodyStructure;
  /** For `raw` bodies: the media type and schema the OpenAPI document shows (e.g. multipart), and other media types taking the same fields. */
  rawBody?: { contentType: string; schema: Record<string, unknown>; also?: string[] };
  /**
   * Headers documented (and, when `required`, enforced) for this route. `handlerChecks`: required,
   * but the handler refuses its absence with its own code and in its own order (e.g. 428 for
   * If-Match after the role check), so the pipeline leaves it alone.
   */
  headers?: { name: string; required: boolean; description: string; handlerChecks?: boolean }[];
  errorFormat?: ErrorFormat;
  /** Left out of the OpenAPI document (static assets). */
  hidden?: boolean;
  /**
   * Set on every route that moves money (postings, holds, captures, reversals): how an API
   * key's amount budget counts it (shared/api-key-budget.ts). The ledger refuses to move money
   * for a route that does not say (core/http/money.ts); it comes from the route's declaration.
   */
  movesMoney?: MoneyMovement;
  /** The roles of the route's declaration (core/http/declared.ts), handed to the handler as `routeRoles`. */
  roles?: readonly string[];
  responses: Record<number, ResponseSpec>;
  handler: (ctx: RequestContext<Static<P>, Static<Q>, Static<B>>) => Promise<Reply>;
}

/** Identity function that keeps the handler's types tied to the schemas. */
export function defineRoute<P extends TSchema, Q extends TSchema, B extends TSchema>(
  spec: RouteSpec<P, Q, B>,
): RouteSpec {
  return spec as unknown as RouteSpec;
}
