/**
 * API keys (SPEC 2.9): created or rotated for the caller's tenant, secret returned once,
 * stored sealed (the edge needs it to check HMAC signatures) and as SHA-256 (for the
 * x-api-key-secret header). Every change is audited in its transaction, and the table's
 * trigger NOTIFYs `api_keys_changed` so edge caches drop the key at once.
 */
import { createHash, randomBytes } from 'node:crypto';
import { appendAudit } from '../../shared/audit.ts';
import type { Db, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { PageRequest } from '../http/cursor.ts';

/** Rotation keeps the previous secret valid for at most this long (and this by default). */
export const maxRotationGraceS = 24 * 60 * 60;
export const defaultRotationGraceS = 60 * 60;

const base62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
function randomBase62(length: number): string {
  const bytes = randomBytes(length * 2);
  let out = '';
  for (const b of bytes) {
    if (b < 248) out += base62[b % 62];
    if (out.length === length) break;
  }
  return out.padEnd(length, 'A');
}

export interface ApiKeyView {
  id: string;
  name: string;
  scopes: string[];
  budget: Record<string, unknown>;
  ip_allowlist: string[];
  expires_at: string | null;
  created_by: string;
  created_at: string;
  rotated_at: string | null;
  revoked_at: string | null;
}

export interface NewKey {
  name: string;
  scopes: string[];
  budget: Record<string, unknown>;
  ipAllowlist: string[];
  expiresAt: string | undefined;
}

interface Row {
  id: string;
  name: string;
  scopes: string[];
  budget: Record<string, unknown>;
  ip_allowlist: string[];
  expires_at: Date | null;
  created_by: string;
  created_at: Date;
  rotated_at: Date | null;
  revoked_at: Date | null;
}

const columns =
  'id, name, scopes, budget, ip_allowlist::text[] AS ip_allowlist, expires_at, created_by, created_at, rotated_at, revoked_at';

function view(r: Row): ApiKeyView {
  return {
    id: r.id,
    name: r.name,
    scopes: r.scopes,
    budget: r.budget,
    ip_allowlist: r.ip_allowlist,
    expires_at: r.expires_at?.toISOString() ?? null,
    created_by: r.created_by,
    created_at: r.created_at.toISOString(),
    rotated_at: r.rotated_at?.toISOString() ?? null,
    revoked_at: r.revoked_at?.toISOString() ?? null,
  };
}

const sha256 = (s: string) => createHash('sha256').update(s).digest();

/** Who creates, rotates or revokes a key: an id, or the staff caller with its AAL and session. */
export type KeyActor = string | { id: string; aal: number; sessionId: string | undefined };

export class ApiKeys {
  constructor(
    private readonly db: Db,
    private readonly keys: KeyStore,
  ) {}

  private seal(id: string, secret: string): Buffer {
    return this.keys.apiKeySecrets.seal(id, Buffer.from(secret));
  }

  /**
   * Re-seal secrets sealed with the master key before API-key secrets had a key of their own
   * (migration 0790): run by core at start-up, before it serves; the edge reads only re-sealed rows.
   */
  async resealLegacySecrets(): Promise<number> {
    return this.db.tx(async (q) => {
      const { rows } = await q.query<{ id: string; secret_enc: Buffer; prev_secret_enc: Buffer | null }>(
        'SELECT id, secret_enc, prev_secret_enc FROM api_keys WHERE seal = 1 FOR UPDATE',
      );
      const legacy = (sealed: Buffer, id: string) =>
        this.keys.apiKeySecrets.seal(id, this.keys.openSecret(sealed, `apikey:${id}`));
      for (const r of rows) {
        await q.query('UPDATE api_keys SET secret_enc = $2, prev_secret_enc = $3, seal = 2 WHERE id = $1', [
          r.id,
          legacy(r.secret_enc, r.id),
          r.prev_secret_enc ? legacy(r.prev_secret_enc, r.id) : null,
        ]);
      }
      return rows.length;
    });
  }

  async create(tenantId: string, actor: KeyActor, k: NewKey): Promise<{ key: ApiKeyView; secret: string }> {
    const id = `pk_live_${randomBase62(24)}`;
    const secret = `sk_live_${randomBytes(32).toString('base64url')}`;
    return this.db.tx(async (q) => {
      const { rows } = await q.query<Row>(
        `INSERT INTO api_keys (id, tenant_id, name, secret_enc, secret_hash, scopes, budget, ip_allowlist, expires_at, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8::cidr[], $9, $10) RETURNING ${columns}`,
        [
          id,
          tenantId,
          k.name,
          this.seal(id, secret),
          sha256(secret),
          k.scopes,
          JSON.stringify(k.budget),
          k.ipAllowlist,
          k.expiresAt ?? null,
          typeof actor === 'string' ? actor : actor.id,
        ],
      );
      const key = view(rows[0] as Row);
      // The ranges as stored and shown (`cidr::text`: `2001:db8::/32` for `2001:DB8::/32`), not
      // as sent, so the audit names what GET and the edge read.
      await this.audit(q, tenantId, actor, 'apikey.create', id, {
        scopes: k.scopes,
        budget: k.budget,
        ip_allowlist: key.ip_allowlist,
      });
      return { key, secret };
    });
  }

  /** A new secret for an existing key; the previous one stays valid for `graceS` seconds. */
  async rotate(
    tenantId: string,
    actor: KeyActor,
    id: string,
    graceS: number,
  ): Promise<{ key: ApiKeyView; secret: string }> {
    const secret = `sk_live_${randomBytes(32).toString('base64url')}`;
    const grace = Math.min(Math.max(0, graceS), maxRotationGraceS);
    return this.db.tx(async (q) => {
      const { rows } = await q.query<Row>(
        `UPDATE api_keys SET prev_secret_enc = secret_enc, prev_secret_hash = secret_hash,
           prev_valid_until = now() + make_interval(secs => $5), secret_enc = $3, secret_hash = $4, rotated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL RETURNING ${columns}`,
        [tenantId, id, this.seal(id, secret), sha256(secret), grace],
      );
      if (!rows[0]) throw new AppError('API_KEY_NOT_FOUND', 'no active API key with that id');
      await this.audit(q, tenantId, actor, 'apikey.rotate', id, { grace_s: grace });
      return { key: view(rows[0]), secret };
    });
  }

  async revoke(tenantId: string, actor: KeyActor, id: string): Promise<void> {
    await this.db.tx(async (q) => {
      const { rowCount } = await q.query(
        `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE tenant_id = $1 AND id = $2`,
        [tenantId, id],
      );
      if (rowCount !== 1) throw new AppError('API_KEY_NOT_FOUND', 'no API key with that id');
      await this.audit(q, tenantId, actor, 'apikey.revoke', id, {});
    });
  }

  async get(tenantId: string, id: string): Promise<ApiKeyView> {
    const { rows } = await this.db.query<Row>(
      `SELECT ${columns} FROM api_keys WHERE tenant_id = $1 AND id = $2`,
      [tenantId, id],
    );
    if (!rows[0]) throw new AppError('API_KEY_NOT_FOUND', 'no API key with that id');
    return view(rows[0]);
  }

  /** A page of the tenant's keys, newest first, keyed by (created_at, id) (core/http/cursor.ts). */
  async list(
    tenantId: string,
    page: PageRequest,
  ): Promise<{ items: ApiKeyView[]; next_cursor: string | null }> {
    const { rows } = await this.db.query<Row>(
      `SELECT ${columns} FROM api_keys WHERE tenant_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3))
       ORDER BY created_at DESC, id DESC LIMIT $4`,
      [tenantId, page.after?.[0] ?? null, page.after?.[1] ?? null, page.limit + 1],
    );
    const { items, next_cursor } = page.finish(rows.map(view), (k) => [k.created_at, k.id]);
    return { items, next_cursor };
  }

  private audit(
    q: TxClient,
    tenantId: string,
    actor: KeyActor,
    action: string,
    id: string,
    attrs: Record<string, unknown>,
  ) {
    if (typeof actor === 'string')
      return appendAudit(q, [
        { tenantId, actor: { type: 'service', id: actor }, action, target: { type: 'api_key', id }, attrs },
      ]);
    // Issue 14 item 6: a person is named with the AAL and session they acted with.
    return appendAudit(q, [
      {
        tenantId,
        actor: { type: 'staff', id: actor.id },
        action,
        target: { type: 'api_key', id },
        attrs: { ...attrs, aal: actor.aal, ...(actor.sessionId ? { sessionId: actor.sessionId } : {}) },
      },
    ]);
  }
}
