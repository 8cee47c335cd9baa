/** TypeBox validation at the HTTP boundary: compiled once per schema, errors listed by path. */
import type { Static, TSchema } from '@sinclair/typebox';
import { FormatRegistry } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { Value } from '@sinclair/typebox/value';
import { AppError } from '../../shared/errors.ts';

/**
 * A calendar date PostgreSQL takes: years 0001–9999 and a day that exists in its month
 * (Date.parse takes 2023-02-29 as 1 March and year 0000; PostgreSQL refuses both: a 500).
 */
function realDate(y: string, m: string, d: string): boolean {
  const [year, month, day] = [Number(y), Number(m), Number(d)];
  const t = new Date(0);
  t.setUTCFullYear(year, month - 1, day);
  return year >= 1 && t.getUTCFullYear() === year && t.getUTCMonth() === month - 1 && t.getUTCDate() === day;
}

/** RFC 3339 date-time with an explicit offset; hours 00–23, seconds 00–59, offsets within PostgreSQL's ±15:59. */
const dateTime =
  /^(\d{4})-(\d{2})-(\d{2})T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-](0\d|1[0-5]):[0-5]\d)$/i;

/** JSON Schema formats the schemas use; TypeBox knows none until they are registered. */
const formats: Record<string, (v: string) => boolean> = {
  uuid: (v) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v),
  // A real instant that PostgreSQL's timestamptz reads as the same instant.
  'date-time': (v) => {
    const m = dateTime.exec(v);
    return m !== null && realDate(m[1] as string, m[2] as string, m[3] as string);
  },
  date: (v) => {
    const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(v);
    return m !== null && realDate(m[1] as string, m[2] as string, m[3] as string);
  },
  uri: (v) => {
    try {
      return new URL(v).protocol.length > 1;
    } catch {
      return false;
    }
  },
  email: (v) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(v),
};
for (const [name, check] of Object.entries(formats))
  if (!FormatRegistry.Has(name)) FormatRegistry.Set(name, check);

const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();

/** The compiled checker of `schema`, compiled once. */
export function checkerFor<T extends TSchema>(schema: T): TypeCheck<T> {
  let check = compiled.get(schema);
  if (!check) {
    check = TypeCompiler.Compile(schema);
    compiled.set(schema, check);
  }
  return check as TypeCheck<T>;
}

/** Maximum number of individual problems reported in one 400. */
const maxReportedErrors = 10;

/** Deeper than this, a request value is refused: no route takes more, and walks stay bounded. */
export const maxNestingDepth = 32;
// A NUL (PostgreSQL text and jsonb cannot hold one) or a lone surrogate (not Unicode: jsonb
// refuses its escape, UTF-8 has no encoding of it).
const unstorableText = /[\u0000]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function textProblem(s: string): string | undefined {
  return unstorableText.test(s) ? 'contains a NUL character or is not well-formed Unicode' : undefined;
}

function valueProblem(v: unknown, fromText: boolean): string | undefined {
  if (typeof v === 'string') return textProblem(v);
  if (typeof v !== 'number') return undefined;
  if (!Number.isFinite(v)) return 'is not a finite number (it overflows)';
  // Digits in a query or path beyond 2^53 are not read exactly (an offset of 9e20 is no
  // offset). JSON bodies may carry such numbers (nanosecond times in a policy input).
  if (fromText && Number.isInteger(v) && !Number.isSafeInteger(v)) return 'is too large to be read exactly';
  return undefined;
}

/**
 * Refuse with 400 what no route can store or read exactly (issue 13 item 8), whatever the
 * route's schema: strings (and object keys) with a NUL or a lone surrogate, numbers that overflow
 * to Infinity (`1e999`), nesting deeper than `maxNestingDepth`, and (`fromText`: query values
 * converted from text) integers beyond 2^53. Iterative, so a deeply nested body cannot exhaust
 * the stack. Returns `value`.
 */
export function storable<T>(value: T, where: string, fromText = false): T {
  const stack: { v: unknown; path: string; depth: number }[] = [{ v: value, path: where, depth: 0 }];
  for (let item = stack.pop(); item; item = stack.pop()) {
    const { v, path, depth } = item;
    let problem = valueProblem(v, fromText);
    if (!problem && v !== null && typeof v === 'object') {
      if (depth >= maxNestingDepth) problem = `is nested more than ${maxNestingDepth} levels deep`;
      else {
        for (const [k, child] of Object.entries(v)) {
          const keyProblem = textProblem(k);
          if (keyProblem) throw invalid(`${path}`, `has a key that ${keyProblem}`);
          stack.push({ v: child, path: `${path}/${k}`, depth: depth + 1 });
        }
      }
    }
    if (problem) throw invalid(path, problem);
  }
  return value;
}

function invalid(path: string, message: string): AppError {
  return new AppError('VALIDATION_FAILED', `${path}: ${message}`, { extra: { errors: [{ path, message }] } });
}

/**
 * A query string (or form body) as name → value, refusing percent-escapes that are not UTF-8
 * (`%ff`, an encoded surrogate: URLSearchParams would silently turn them into U+FFFD) and a
 * parameter given twice: no route takes a list, and taking one of two values silently (the last,
 * here) could differ from what a proxy or the edge read (RFC 6749 3.1 refuses repeats too).
 */
export function parseQuery(search: string): Record<string, string> {
  const raw = search.startsWith('?') ? search.slice(1) : search;
  for (const pair of raw.split('&')) {
    try {
      decodeURIComponent(pair.replaceAll('+', ' '));
    } catch {
      throw invalid('query', 'is not percent-encoded UTF-8');
    }
  }
  const out: Record<string, string> = {};
  for (const [name, value] of new URLSearchParams(raw)) {
    if (Object.hasOwn(out, name)) throw invalid(`query.${name}`, 'is given more than once');
    out[name] = value;
  }
  return out;
}

const plainInteger = /^-?(0|[1-9][0-9]*)$/;
const plainNumber = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;

/**
 * Query text converted by the schema, except numbers not written plainly: TypeBox reads
 * `1e3`, `1.5`, `0x10` and ` 5` as the integers 1, 1, 16 and 5, so a `limit=1e3` answered one
 * item. Such text stays text, and the schema's check refuses it by name.
 */
function converted(schema: TSchema, value: unknown): unknown {
  // Value.Convert converts an object in place: the text is read from a copy.
  const text = typeof value === 'object' && value !== null ? { ...(value as Record<string, unknown>) } : {};
  const out = Value.Convert(schema, value);
  const props = (schema as { properties?: Record<string, TSchema> }).properties;
  if (!props || typeof out !== 'object' || out === null) return out;
  for (const [name, prop] of Object.entries(props)) {
    const raw = text[name];
    const form = prop.type === 'integer' ? plainInteger : prop.type === 'number' ? plainNumber : undefined;
    if (form && typeof raw === 'string' && !form.test(raw)) (out as Record<string, unknown>)[name] = raw;
  }
  return out;
}

/**
 * Check `value` against `schema`; on failure throw VALIDATION_FAILED naming each bad field.
 * `where` prefixes paths (`body`, `query`, `params`). `convert` coerces query-string text.
 * Values no route can store are refused first (`storable`).
 */
export function validate<T extends TSchema>(
  schema: T,
  value: unknown,
  where: string,
  convert = false,
): Static<T> {
  const check = checkerFor(schema);
  const input = storable(convert ? converted(schema, value) : value, where, convert);
  if (check.Check(input)) return input;
  const errors = [...check.Errors(input)].slice(0, maxReportedErrors).map((e) => ({
    path: `${where}${e.path || ''}`,
    message: e.message,
  }));
  const first = errors[0];
  const message = first ? `${first.path}: ${first.message}` : `${where} is invalid`;
  throw new AppError('VALIDATION_FAILED', message, { extra: { errors } });
}
