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

/**
 * The first key that one object of `text` (JSON) names twice, or undefined. JSON.parse keeps the
 * last copy, so two readers of one body (a proxy's log, the edge, core) can take different
 * values; where that matters the body is refused instead (RFC 6749 §3.2 for the token request).
 * Keys are compared as decoded (`"a"` and `"\u0061"` are one key). Never throws: a body that is
 * not JSON is refused by its parse, not here.
 */
export function repeatedKey(text: string): string | undefined {
  // One entry per open container: the keys an object named so far; undefined for an array.
  const open: (Set<string> | undefined)[] = [];
  let keyNext = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let j = i + 1;
      while (j < text.length && text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c ? 2 : 1;
      const keys = open.at(-1);
      if (keyNext && keys) {
        const key = keyText(text.slice(i, j + 1));
        if (keys.has(key)) return key;
        keys.add(key);
      }
      keyNext = false;
      i = j;
    } else if (c === 0x7b) {
      open.push(new Set());
      keyNext = true;
    } else if (c === 0x5b || c === 0x7d || c === 0x5d) {
      if (c === 0x5b) open.push(undefined);
      else open.pop();
      keyNext = false;
    } else if (c === 0x2c) keyNext = open.at(-1) !== undefined;
  }
  return undefined;
}

/** A quoted key as decoded; its raw text when it is not a valid JSON string. */
function keyText(quoted: string): string {
  if (!quoted.includes('\\')) return quoted.slice(1, -1);
  try {
    return String(JSON.parse(quoted));
  } catch {
    return quoted;
  }
}

/**
 * What `text`, read as JSON, holds past the bounds outside its strings: containers nested deeper
 * than `maxDepth` (`depth`) or more than `maxCommas` commas (`commas`: an object of n members has
 * n - 1), else undefined. Checked before a JSON.parse that would otherwise build up to 29 times
 * the text in heap (nested empty arrays) to find it is not the shape a route takes. Never throws,
 * allocates nothing; text that is not JSON is left to the parse.
 */
export function jsonStructureProblem(
  text: string,
  maxDepth: number,
  maxCommas: number,
): 'depth' | 'commas' | undefined {
  let depth = 0;
  let commas = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let j = i + 1;
      while (j < text.length && text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c ? 2 : 1;
      i = j;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) return 'depth';
    } else if (c === 0x7d || c === 0x5d) depth -= 1;
    else if (c === 0x2c && ++commas > maxCommas) return 'commas';
  }
  return undefined;
}
