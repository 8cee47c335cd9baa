/**
 * SCIM filters (RFC 7644 section 3.4.2.2): parsed into a tree, then turned into SQL over
 * `staff_users` (Users) or evaluated over plain objects (Groups, six per tenant). Anything the
 * grammar does not allow, an attribute we do not filter on, or a value of the wrong type is
 * 400 `invalidFilter` (issue 14 "Bad input": a malformed filter).
 */
import { AppError } from '../../../shared/errors.ts';

export type CompareOp = 'eq' | 'ne' | 'co' | 'sw' | 'ew' | 'gt' | 'ge' | 'lt' | 'le';
export type Value = string | number | boolean | null;
export type Filter =
  | { kind: 'and'; left: Filter; right: Filter }
  | { kind: 'or'; left: Filter; right: Filter }
  | { kind: 'not'; inner: Filter }
  | { kind: 'pr'; attr: string }
  | { kind: 'cmp'; attr: string; op: CompareOp; value: Value };

const compareOps = new Set<string>(['eq', 'ne', 'co', 'sw', 'ew', 'gt', 'ge', 'lt', 'le']);
/** RFC 7644 caps nothing, but a filter is one query string: bound the work a client can ask for. */
export const maxFilterLength = 1000;
const maxDepth = 20;

type Token = { t: 'word'; v: string } | { t: 'str'; v: string } | { t: '(' } | { t: ')' };

function invalid(detail: string): AppError {
  return new AppError('SCIM_INVALID_FILTER', detail);
}

function tokenize(text: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i] as string;
    if (c === ' ' || c === '\t') {
      i++;
    } else if (c === '(' || c === ')') {
      out.push({ t: c });
      i++;
    } else if (c === '"') {
      // A JSON string (RFC 7644: compValue is a JSON value), escapes included.
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      if (j >= text.length) throw invalid('unterminated string in filter');
      try {
        out.push({ t: 'str', v: JSON.parse(text.slice(i, j + 1)) as string });
      } catch {
        throw invalid('malformed string in filter');
      }
      i = j + 1;
    } else {
      const m = /^[A-Za-z0-9:._$+-]+/.exec(text.slice(i));
      if (!m) throw invalid(`unexpected character ${JSON.stringify(c)} in filter`);
      out.push({ t: 'word', v: m[0] });
      i += m[0].length;
    }
  }
  return out;
}

class Parser {
  private i = 0;
  constructor(private readonly tokens: Token[]) {}

  parse(): Filter {
    const f = this.or(0);
    if (this.i !== this.tokens.length) throw invalid('unexpected text after the filter');
    return f;
  }

  private peekWord(): string | undefined {
    const t = this.tokens[this.i];
    return t?.t === 'word' ? t.v.toLowerCase() : undefined;
  }

  private or(depth: number): Filter {
    let left = this.and(depth);
    while (this.peekWord() === 'or') {
      this.i++;
      left = { kind: 'or', left, right: this.and(depth) };
    }
    return left;
  }

  private and(depth: number): Filter {
    let left = this.unary(depth);
    while (this.peekWord() === 'and') {
      this.i++;
      left = { kind: 'and', left, right: this.unary(depth) };
    }
    return left;
  }

  private unary(depth: number): Filter {
    if (depth > maxDepth) throw invalid('filter nests too deeply');
    const t = this.tokens[this.i];
    if (!t) throw invalid('filter ends too early');
    if (t.t === 'word' && t.v.toLowerCase() === 'not' && this.tokens[this.i + 1]?.t === '(') {
      this.i++;
      return { kind: 'not', inner: this.group(depth) };
    }
    if (t.t === '(') return this.group(depth);
    if (t.t !== 'word') throw invalid('expected an attribute name');
    this.i++;
    const attr = t.v;
    const op = this.peekWord();
    if (!op) throw invalid(`expected an operator after ${attr}`);
    this.i++;
    if (op === 'pr') return { kind: 'pr', attr };
    if (!compareOps.has(op)) throw invalid(`unknown operator ${op}`);
    return { kind: 'cmp', attr, op: op as CompareOp, value: this.value() };
  }

  private group(depth: number): Filter {
    if (this.tokens[this.i]?.t !== '(') throw invalid('expected (');
    this.i++;
    const inner = this.or(depth + 1);
    if (this.tokens[this.i]?.t !== ')') throw invalid('missing )');
    this.i++;
    return inner;
  }

  private value(): Value {
    const t = this.tokens[this.i++];
    if (!t) throw invalid('expected a value');
    if (t.t === 'str') return t.v;
    if (t.t !== 'word') throw invalid('expected a value');
    if (t.v === 'true') return true;
    if (t.v === 'false') return false;
    if (t.v === 'null') return null;
    if (/^-?\d+(\.\d+)?$/.test(t.v)) return Number(t.v);
    throw invalid(`a value must be a quoted string, a number, true, false or null (got ${t.v})`);
  }
}

export function parseFilter(text: string): Filter {
  if (text.length > maxFilterLength) throw invalid(`filter longer than ${maxFilterLength} characters`);
  if (text.trim() === '') throw invalid('empty filter');
  return new Parser(tokenize(text)).parse();
}

/** Attribute names are case-insensitive and may carry their schema URN (RFC 7644 3.10). */
export function normaliseAttr(attr: string, schemaUrn: string): string {
  const lower = attr.toLowerCase();
  const prefix = `${schemaUrn.toLowerCase()}:`;
  return lower.startsWith(prefix) ? lower.slice(prefix.length) : lower;
}

// --- SQL over staff_users (alias u) ------------------------------------------------------

type Kind = 'text' | 'exact' | 'bool' | 'time';
interface Column {
  sql: string;
  kind: Kind;
}

/** Users attributes a filter may name, with caseExact per RFC 7643 section 4.1. */
const userColumns: Record<string, Column> = {
  id: { sql: 'u.id::text', kind: 'exact' },
  username: { sql: 'u.user_name', kind: 'text' },
  externalid: { sql: 'u.external_id', kind: 'exact' },
  displayname: { sql: 'u.display_name', kind: 'text' },
  active: { sql: 'u.active', kind: 'bool' },
  'name.givenname': { sql: "(u.attributes -> 'name' ->> 'givenName')", kind: 'text' },
  'name.familyname': { sql: "(u.attributes -> 'name' ->> 'familyName')", kind: 'text' },
  'name.formatted': { sql: "(u.attributes -> 'name' ->> 'formatted')", kind: 'text' },
  'meta.created': { sql: 'u.created_at', kind: 'time' },
  'meta.lastmodified': { sql: 'u.updated_at', kind: 'time' },
};
/** Multi-valued emails: a filter on them matches when any email matches. */
const emailsJson =
  "(CASE WHEN jsonb_typeof(u.attributes -> 'emails') = 'array' THEN u.attributes -> 'emails' ELSE '[]'::jsonb END)";

export const userSchema = 'urn:ietf:params:scim:schemas:core:2.0:User';

function stringCompare(col: string, op: CompareOp, p: string, caseExact: boolean): string {
  const c = caseExact ? col : `lower(${col})`;
  const v = caseExact ? p : `lower(${p})`;
  switch (op) {
    case 'eq':
      return `${c} = ${v}`;
    case 'ne':
      return `${c} IS DISTINCT FROM ${v}`;
    case 'co':
      return `strpos(${c}, ${v}) > 0`;
    case 'sw':
      return `left(${c}, length(${v})) = ${v}`;
    case 'ew':
      return `right(${c}, length(${v})) = ${v}`;
    default:
      return `${c} ${{ gt: '>', ge: '>=', lt: '<', le: '<=' }[op]} ${v}`;
  }
}

/** A WHERE fragment (with `$n` parameters appended to `params`) for a Users filter. */
export function userFilterSql(f: Filter, params: unknown[]): string {
  const param = (v: unknown) => {
    params.push(v);
    return `$${params.length}`;
  };
  const walk = (n: Filter): string => {
    if (n.kind === 'and' || n.kind === 'or')
      return `(${walk(n.left)} ${n.kind.toUpperCase()} ${walk(n.right)})`;
    if (n.kind === 'not') return `(NOT COALESCE(${walk(n.inner)}, false))`;
    const attr = normaliseAttr(n.attr, userSchema);
    if (attr === 'emails' || attr === 'emails.value') {
      if (n.kind === 'pr') return `jsonb_array_length(${emailsJson}) > 0`;
      if (typeof n.value !== 'string') throw invalid('emails.value compares with a string');
      return `EXISTS (SELECT 1 FROM jsonb_array_elements(${emailsJson}) e WHERE ${stringCompare("(e ->> 'value')", n.op, param(n.value), false)})`;
    }
    const col = userColumns[attr];
    if (!col) throw invalid(`cannot filter on ${n.attr}`);
    if (n.kind === 'pr')
      return col.kind === 'text' || col.kind === 'exact'
        ? `coalesce(${col.sql}, '') <> ''`
        : `${col.sql} IS NOT NULL`;
    if (col.kind === 'bool') {
      if (typeof n.value !== 'boolean' || (n.op !== 'eq' && n.op !== 'ne'))
        throw invalid(`${n.attr} takes eq or ne with true or false`);
      return n.op === 'eq' ? `${col.sql} = ${param(n.value)}` : `${col.sql} <> ${param(n.value)}`;
    }
    if (col.kind === 'time') {
      if (
        typeof n.value !== 'string' ||
        Number.isNaN(Date.parse(n.value)) ||
        !['eq', 'ne', 'gt', 'ge', 'lt', 'le'].includes(n.op)
      ) {
        throw invalid(`${n.attr} compares with a date-time`);
      }
      return stringCompare(col.sql, n.op, `${param(new Date(n.value).toISOString())}::timestamptz`, true);
    }
    if (n.value === null) {
      if (n.op === 'eq') return `${col.sql} IS NULL`;
      if (n.op === 'ne') return `${col.sql} IS NOT NULL`;
      throw invalid(`${n.op} needs a value`);
    }
    if (typeof n.value !== 'string') throw invalid(`${n.attr} compares with a string`);
    return stringCompare(col.sql, n.op, param(n.value), col.kind === 'exact');
  };
  return walk(f);
}

// --- evaluation over plain objects (Groups) ----------------------------------------------

/** Whether `f` matches; `get(attr)` returns the attribute's values (several for multi-valued ones). */
export function matches(f: Filter, get: (attr: string) => Value[] | undefined): boolean {
  if (f.kind === 'and') return matches(f.left, get) && matches(f.right, get);
  if (f.kind === 'or') return matches(f.left, get) || matches(f.right, get);
  if (f.kind === 'not') return !matches(f.inner, get);
  const values = get(f.attr);
  if (values === undefined) throw invalid(`cannot filter on ${f.attr}`);
  if (f.kind === 'pr') return values.some((v) => v !== null && v !== '');
  const want = f.value;
  return values.some((v) => {
    if (typeof v === 'string' && typeof want === 'string') {
      const a = v.toLowerCase();
      const b = want.toLowerCase();
      switch (f.op) {
        case 'eq':
          return a === b;
        case 'ne':
          return a !== b;
        case 'co':
          return a.includes(b);
        case 'sw':
          return a.startsWith(b);
        case 'ew':
          return a.endsWith(b);
        case 'gt':
          return a > b;
        case 'ge':
          return a >= b;
        case 'lt':
          return a < b;
        case 'le':
          return a <= b;
      }
    }
    if (f.op === 'eq') return v === want;
    if (f.op === 'ne') return v !== want;
    throw invalid(`${f.op} compares strings`);
  });
}
