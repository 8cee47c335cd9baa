/** Schemas shared by the administration routes: Problem+JSON, pagination, codes, money. */
import { Type, type TSchema } from '@sinclair/typebox';
import { AppError } from '../http/errors.ts';

export const ProblemSchema = Type.Object({
  type: Type.String(), title: Type.String(), status: Type.Integer(), detail: Type.String(), instance: Type.String(), code: Type.String(),
}, { additionalProperties: true });

/** ISO 3166-1 alpha-2, upper case (a lower-case code is a 400). */
export const CountryCode = Type.String({ pattern: '^[A-Z]{2}$', description: 'ISO 3166-1 alpha-2, upper case' });
/** ISO 4217 alphabetic code, upper case. */
export const CurrencyCode = Type.String({ pattern: '^[A-Z]{3}$', description: 'ISO 4217 alphabetic code' });
export const ProductCode = Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$' });
export const Uuid = Type.String({ pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' });
export const Decimal = Type.String({ pattern: '^(0|[1-9][0-9]{0,13})(\\.[0-9]{1,6})?$', description: 'decimal string, e.g. "12.50"' });
export const Metadata = Type.Record(Type.String({ maxLength: 64 }), Type.Unknown(), { maxProperties: 64 });

/** SPEC 8: max and default page size are not given; 50 by default, at most 200. */
export const defaultPageSize = 50;
export const maxPageSize = 200;
export const pageQuery = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: maxPageSize, description: `page size (default ${defaultPageSize})` })),
  cursor: Type.Optional(Type.String({ maxLength: 512, description: 'next_cursor of the previous page' })),
};

export const Page = <T extends TSchema>(item: T) => Type.Object({ items: Type.Array(item), next_cursor: Type.Union([Type.String(), Type.Null()]) });

export function encodeCursor(values: readonly (string | number)[]): string {
  return Buffer.from(JSON.stringify(values)).toString('base64url');
}

/** The sort key a cursor carries; 400 CURSOR_INVALID when it is not one of ours. */
export function decodeCursor(text: string | undefined, arity: number): (string | number)[] | undefined {
  if (text === undefined) return undefined;
  try {
    const v = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(v) && v.length === arity && v.every((x) => typeof x === 'string' || typeof x === 'number')) return v as (string | number)[];
  } catch {
    // fall through
  }
  throw new AppError('CURSOR_INVALID', 'cursor is not a next_cursor this API returned');
}

/** Rows were fetched with limit + 1: cut to `limit` and derive the next cursor from the last row. */
export function pageOf<T>(rows: T[], limit: number, keyOf: (row: T) => (string | number)[]): { items: T[]; next_cursor: string | null } {
  const items = rows.slice(0, limit);
  const last = items.at(-1);
  return { items, next_cursor: rows.length > limit && last !== undefined ? encodeCursor(keyOf(last)) : null };
}

export const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());
