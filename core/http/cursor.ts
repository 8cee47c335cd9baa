/**
 * The one cursor codec of core (issue 21 item 2): every cursor-paged list (administration,
 * agents, customer history, API keys) pages through it (SPEC 4.6, 8: `limit` + `cursor`, stable
 * ordering) and answers its next page as `next_cursor`. A cursor carries the sort key of the last row returned and an HMAC over that key
 * and the list it belongs to (caller's tenant, method, path and every filter except `limit`,
 * `cursor` and `offset`), keyed by a secret sealed in `admin_secrets`. So a cursor that was
 * edited, made up, or taken from another list or another filter is a 400 CURSOR_INVALID, never
 * a database error or a page of something else; the same cursor works on every core instance.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { canonicalJson } from '../../shared/canonical-json.ts';
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { RequestContext } from './route.ts';

/** SPEC 8: max and default page size are not given; 50 by default unless a list says otherwise. */
export const defaultPageSize = 50;

/** The `cursor` query parameter of every cursor-paged list. */
export const cursorParam = Type.String({ maxLength: 512, description: 'next_cursor of the previous page' });
/** The `next_cursor` of a page: null on the last one. */
export const NextCursor = Type.Union([Type.String(), Type.Null()]);
/**
 * Issue 21 item 2: lists that answered `nextCursor` answer `next_cursor` and, for one more
 * release, `nextCursor` with the same value; `nextCursor` goes in the release after next.
 */
export const LegacyNextCursor = Type.Union([Type.String(), Type.Null()], {
  deprecated: true,
  description: 'the same as next_cursor; removed in the release after next (issue 21 item 2)',
});
export function withLegacyName<T extends { next_cursor: string | null }>(
  page: T,
): T & { nextCursor: string | null } {
  return { ...page, nextCursor: page.next_cursor };
}

export type SortKey = (string | number)[];

export interface PageRequest {
  /** Page size (the query's `limit`, else the default). Fetch `limit + 1` rows. */
  limit: number;
  /** The sort key of the last row of the previous page, or undefined on the first page. */
  after: SortKey | undefined;
  /** Cut rows fetched with `limit + 1` to the page and sign the next cursor from its last row. */
  finish<T>(rows: T[], keyOf: (row: T) => SortKey): { items: T[]; next_cursor: string | null };
}

const secretName = 'cursor_mac';
const macBytes = 16;
const notOurs = () =>
  new AppError(
    'CURSOR_INVALID',
    'cursor is not a next_cursor this list returned (it was changed, or belongs to another list or filter)',
  );

export class Cursors {
  private key: Promise<Buffer> | undefined;
  constructor(
    private readonly db: Db,
    private readonly keys: KeyStore,
  ) {}

  private macKey(): Promise<Buffer> {
    this.key ??= this.load().catch((err: unknown) => {
      this.key = undefined;
      throw err;
    });
    return this.key;
  }

  private async load(): Promise<Buffer> {
    const aad = `admin:${secretName}`;
    await this.db.query(
      'INSERT INTO admin_secrets (name, sealed) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING',
      [secretName, this.keys.sealSecret(randomBytes(32), aad)],
    );
    const { rows } = await this.db.query<{ sealed: Buffer }>(
      'SELECT sealed FROM admin_secrets WHERE name = $1',
      [secretName],
    );
    const sealed = rows[0]?.sealed;
    if (!sealed) throw new AppError('INTERNAL', 'cursor key missing');
    return this.keys.openSecret(sealed, aad);
  }

  /**
   * Read `limit` (else `defaultLimit`) and `cursor` from the request and bind the page to this
   * caller (`tenantId`, or a narrower owner such as `tenant/agent`), path and filter.
   */
  async open(
    ctx: Pick<RequestContext<unknown, unknown, unknown>, 'query' | 'method' | 'path'>,
    tenantId: string,
    arity: number,
    defaultLimit = defaultPageSize,
  ): Promise<PageRequest> {
    const query = (typeof ctx.query === 'object' && ctx.query !== null ? ctx.query : {}) as Record<
      string,
      unknown
    >;
    const { limit: rawLimit, cursor, offset: _offset, ...filters } = query;
    const limit = typeof rawLimit === 'number' ? rawLimit : defaultLimit;
    const key = await this.macKey();
    const binding = `${tenantId}\n${ctx.method} ${ctx.path}\n${canonicalJson(filters)}\n`;
    const mac = (payload: string) =>
      createHmac('sha256', key).update(binding).update(payload).digest().subarray(0, macBytes);
    return {
      limit,
      after: cursor === undefined ? undefined : verify(String(cursor), arity, mac),
      finish: (rows, keyOf) => {
        const items = rows.slice(0, limit);
        const last = items.at(-1);
        if (rows.length <= limit || last === undefined) return { items, next_cursor: null };
        const payload = Buffer.from(JSON.stringify(keyOf(last))).toString('base64url');
        return { items, next_cursor: `${payload}.${mac(payload).toString('base64url')}` };
      },
    };
  }
}

const shared = new WeakMap<KeyStore, Cursors>();
/** The process's codec for these keys: one MAC key load however many route groups page. */
export function cursorsOf(db: Db, keys: KeyStore): Cursors {
  let c = shared.get(keys);
  if (!c) {
    c = new Cursors(db, keys);
    shared.set(keys, c);
  }
  return c;
}

function verify(text: string, arity: number, mac: (payload: string) => Buffer): SortKey {
  const parts = text.split('.');
  if (parts.length !== 2 || !parts[0] || !parts[1]) throw notOurs();
  const [payload, given] = parts as [string, string];
  const want = mac(payload);
  const got = Buffer.from(given, 'base64url');
  if (got.length !== want.length || got.toString('base64url') !== given || !timingSafeEqual(got, want))
    throw notOurs();
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    throw notOurs();
  }
  if (
    !Array.isArray(v) ||
    v.length !== arity ||
    !v.every((x) => typeof x === 'string' || typeof x === 'number')
  )
    throw notOurs();
  return v as SortKey;
}
