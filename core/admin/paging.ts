/**
 * Cursor pagination for every administration list (SPEC 4.6, 8: `limit` + `cursor`, stable
 * ordering). A cursor carries the sort key of the last row returned and an HMAC over that key
 * and the list it belongs to (caller's tenant, method, path and every filter except `limit`,
 * `cursor` and `offset`), keyed by a secret sealed in `admin_secrets`. So a cursor that was
 * edited, made up, or taken from another list or another filter is a 400 CURSOR_INVALID, never
 * a database error or a page of something else; the same cursor works on every core instance.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { canonicalJson } from '../../shared/canonical-json.ts';
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { RequestContext } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { defaultPageSize } from './schemas.ts';

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

  /** Read `limit` and `cursor` from the request and bind the page to this caller, path and filter. */
  async open(
    ctx: RequestContext<unknown, unknown, unknown>,
    tenantId: string,
    arity: number,
  ): Promise<PageRequest> {
    const query = (typeof ctx.query === 'object' && ctx.query !== null ? ctx.query : {}) as Record<
      string,
      unknown
    >;
    const { limit: rawLimit, cursor, offset: _offset, ...filters } = query;
    const limit = typeof rawLimit === 'number' ? rawLimit : defaultPageSize;
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
