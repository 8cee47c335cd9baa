/** Schemas shared by the administration routes: Problem+JSON, pagination, codes, money. */
import { Type, type TSchema } from '@sinclair/typebox';
import { cursorParam, defaultPageSize, NextCursor } from '../http/cursor.ts';

export { ProblemSchema } from '../http/responses.ts';

/** ISO 3166-1 alpha-2, upper case (a lower-case code is a 400). */
export const CountryCode = Type.String({
  pattern: '^[A-Z]{2}$',
  description: 'ISO 3166-1 alpha-2, upper case',
});
/** ISO 4217 alphabetic code, upper case. */
export const CurrencyCode = Type.String({ pattern: '^[A-Z]{3}$', description: 'ISO 4217 alphabetic code' });
export const ProductCode = Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$' });
export const Uuid = Type.String({
  pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$',
});
export const Decimal = Type.String({
  pattern: '^(0|[1-9][0-9]{0,13})(\\.[0-9]{1,6})?$',
  description: 'decimal string, e.g. "12.50"',
});
export const Metadata = Type.Record(Type.String({ maxLength: 64 }), Type.Unknown(), { maxProperties: 64 });

/** SPEC 8: max and default page size are not given; 50 by default (core/http/cursor.ts), at most 200. */
export { defaultPageSize };
export const maxPageSize = 200;
export const pageQuery = {
  limit: Type.Optional(
    Type.Integer({ minimum: 1, maximum: maxPageSize, description: `page size (default ${defaultPageSize})` }),
  ),
  cursor: Type.Optional(cursorParam),
};

export const Page = <T extends TSchema>(item: T) =>
  Type.Object({ items: Type.Array(item), next_cursor: NextCursor });

export const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());

/** Response components the administration routes share (issue 15 item 4). */
export const Timestamp = Type.String({ format: 'date-time' });
export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
/** A JSON object whose members the caller defines (metadata, config values, rules). */
export const JsonObject = Type.Record(Type.String(), Type.Unknown());

/** One hash-chained audit record (SPEC 2.8) as the audit and history routes show it. */
export const AuditRecord = Type.Object({
  id: Type.Integer({ minimum: 1 }),
  ts: Timestamp,
  tenant_id: Type.String(),
  actor: Type.Unknown(),
  action: Type.String(),
  target: Type.Unknown(),
  decision: Type.Unknown(),
  attrs: Type.Unknown(),
  prev_hash: Type.String({ pattern: '^[0-9a-f]+$' }),
  row_hash: Type.String({ pattern: '^[0-9a-f]+$' }),
});
export const AuditPage = Page(AuditRecord);

/** `{items}` lists that are not paged (reference data). */
export const ItemsOf = <T extends TSchema>(item: T) => Type.Object({ items: Type.Array(item) });
/** An amount as the API writes it: a decimal string in the currency's minor units (SPEC 2.3). */
export const AmountOut = Type.String({
  pattern: '^(0|[1-9][0-9]*)(\\.[0-9]{1,6})?$',
  description: 'decimal string, e.g. "12.50"',
});
