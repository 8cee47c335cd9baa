/**
 * Canonical JSON: object keys sorted by code unit, no insignificant whitespace, the JSON
 * number form JavaScript produces (RFC 8785 for the values this project hashes or signs:
 * strings, integers, booleans, null, arrays and objects). Used wherever bytes must be the
 * same on both sides: audit row hashes, step-up `orig` ("normalized body"), intent signing.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('canonical JSON has no NaN or Infinity');
    return JSON.stringify(value);
  }
  // Plain loops and string building: this runs for every audit row, on the edge's hot thread.
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      const v: unknown = value[i];
      out += canonicalJson(v === undefined ? null : v);
    }
    return `${out}]`;
  }
  if (typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    // Default sort compares UTF-16 code units, the order RFC 8785 asks for.
    const keys = Object.keys(obj).sort();
    let out = '{';
    let first = true;
    for (const k of keys) {
      const v = obj[k];
      if (v === undefined) continue;
      if (!first) out += ',';
      first = false;
      out += `${JSON.stringify(k)}:${canonicalJson(v)}`;
    }
    return `${out}}`;
  }
  throw new TypeError(`canonical JSON cannot encode ${typeof value}`);
}
