/**
 * Issue 15 item 4: under the test suite core checks every response against the schema its route
 * declares for that status (./responses.ts), so a test that meets a response drifting from the
 * OpenAPI document fails. Off in production: a wrong response is not made worse by a 500 there.
 */
import { declaredResponses, isJsonMedia } from './responses.ts';
import type { Reply, RouteSpec } from './route.ts';
import { checkerFor } from './validate.ts';

/** Errors reported per mismatch: enough to find the field, short enough for one log line. */
const maxReportedErrors = 5;

export interface ResponseProblem {
  path: string;
  message: string;
}

function mediaOf(contentType: string): string {
  return (contentType.split(';')[0] ?? '').trim().toLowerCase();
}

/** `declared` is a media type or a range (`text/*`, `*\/*`). */
function mediaMatches(declared: string, actual: string): boolean {
  const [dType, dSub] = mediaOf(declared).split('/');
  const [aType, aSub] = mediaOf(actual).split('/');
  return (dType === '*' || dType === aType) && (dSub === '*' || dSub === aSub);
}

/** The body as sent: a JSON value, raw text, or nothing. */
function bodyOf(reply: Reply): { contentType: string; json?: unknown; parsed: boolean } | undefined {
  if (reply.raw) {
    const contentType = reply.raw.contentType;
    if (!isJsonMedia(contentType)) return { contentType, parsed: false };
    try {
      return { contentType, json: JSON.parse(reply.raw.data.toString()) as unknown, parsed: true };
    } catch {
      return { contentType, parsed: false };
    }
  }
  if (reply.body === undefined) return undefined;
  const headers = Object.fromEntries(
    Object.entries(reply.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]),
  );
  return { contentType: headers['content-type'] ?? 'application/json', json: reply.body, parsed: true };
}

/** What is wrong with `reply` as an answer of `route`; empty when it matches its declaration. */
export function responseProblems(route: RouteSpec, reply: Reply): ResponseProblem[] {
  const spec = declaredResponses(route)[reply.status];
  if (!spec) return [{ path: '', message: `status ${reply.status} is not declared by the route` }];
  const body = bodyOf(reply);
  if (!body) return spec.schema ? [{ path: '', message: 'the declared body is missing' }] : [];
  const declaredType = spec.contentType ?? 'application/json';
  if (!mediaMatches(declaredType, body.contentType)) {
    if ((spec.alternatives ?? []).some((alt) => mediaMatches(alt, body.contentType))) return [];
    return [
      { path: '', message: `content type ${mediaOf(body.contentType)} is not the declared ${declaredType}` },
    ];
  }
  if (!isJsonMedia(body.contentType)) return [];
  if (!body.parsed) return [{ path: '', message: 'the body is not JSON' }];
  if (!spec.schema)
    return [{ path: '', message: `status ${reply.status} declares no schema for its JSON body` }];
  // A JSON round-trip first: what the schema judges is what the client receives (no Dates, no undefined members).
  const sent: unknown = JSON.parse(JSON.stringify(body.json ?? null));
  const check = checkerFor(spec.schema);
  if (check.Check(sent)) return [];
  return [...check.Errors(sent)]
    .slice(0, maxReportedErrors)
    .map((e) => ({ path: e.path, message: e.message }));
}
