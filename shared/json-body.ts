/**
 * A request body decoded and parsed once (issue 18 item 1: the edge parsed the same body up to
 * four times per Check: tenant, step-up binding, API-key budget, challenge). Every reader takes
 * this instead of the bytes; `json` is absent when the body is empty or not JSON.
 */
export interface JsonBody {
  readonly text: string;
  readonly json: { readonly value: unknown } | undefined;
}

const empty: JsonBody = { text: '', json: undefined };

export function jsonBody(body: Buffer | string): JsonBody {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  if (text.length === 0) return empty;
  try {
    return { text, json: { value: JSON.parse(text) as unknown } };
  } catch {
    return { text, json: undefined };
  }
}

/** A body given as bytes, text or already parsed, as a JsonBody (parsing only the first two). */
export const asJsonBody = (body: Buffer | string | JsonBody): JsonBody =>
  typeof body === 'string' || Buffer.isBuffer(body) ? jsonBody(body) : body;
