/** TypeBox validation at the HTTP boundary: compiled once per schema, errors listed by path. */
import type { Static, TSchema } from '@sinclair/typebox';
import { FormatRegistry } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { Value } from '@sinclair/typebox/value';
import { AppError } from '../../shared/errors.ts';

/** JSON Schema formats the schemas use; TypeBox knows none until they are registered. */
const formats: Record<string, (v: string) => boolean> = {
  uuid: (v) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v),
  // RFC 3339 date-time with an explicit offset, and a real instant.
  'date-time': (v) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i.test(v) && !Number.isNaN(Date.parse(v)),
  date: (v) => /^\d{4}-\d{2}-\d{2}$/.test(v) && !Number.isNaN(Date.parse(`${v}T00:00:00Z`)),
  uri: (v) => {
    try {
      return new URL(v).protocol.length > 1;
    } catch {
      return false;
    }
  },
  email: (v) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(v),
};
for (const [name, check] of Object.entries(formats)) if (!FormatRegistry.Has(name)) FormatRegistry.Set(name, check);

const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();

function checkerFor<T extends TSchema>(schema: T): TypeCheck<T> {
  let check = compiled.get(schema);
  if (!check) {
    check = TypeCompiler.Compile(schema);
    compiled.set(schema, check);
  }
  return check as TypeCheck<T>;
}

/** Maximum number of individual problems reported in one 400. */
const maxReportedErrors = 10;

/**
 * Check `value` against `schema`; on failure throw VALIDATION_FAILED naming each bad field.
 * `where` prefixes paths (`body`, `query`, `params`). `convert` coerces query-string text.
 */
export function validate<T extends TSchema>(schema: T, value: unknown, where: string, convert = false): Static<T> {
  const check = checkerFor(schema);
  const input = convert ? Value.Convert(schema, value) : value;
  if (check.Check(input)) return input;
  const errors = [...check.Errors(input)].slice(0, maxReportedErrors).map((e) => ({
    path: `${where}${e.path || ''}`,
    message: e.message,
  }));
  const first = errors[0];
  const message = first ? `${first.path}: ${first.message}` : `${where} is invalid`;
  throw new AppError('VALIDATION_FAILED', message, { extra: { errors } });
}
