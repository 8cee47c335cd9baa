/**
 * Hierarchical configuration (SPEC 2.11 config version, 3, 9.4): versioned values per key at
 * GLOBAL < COUNTRY < TENANT < ENVIRONMENT. GLOBAL and COUNTRY rows are platform rows; TENANT
 * and ENVIRONMENT rows belong to one tenant. Resolution takes, per key, the ACTIVE version of
 * the most specific scope that matches the context and says which scope won.
 */
import type { Queryable } from '../../../shared/db/pool.ts';
import { requirePlatformAdminTenant } from '../../platform/operator.ts';
import { AppError } from '../../../shared/errors.ts';
import { uuidv7 } from '../../../shared/uuid.ts';

export type Scope = 'GLOBAL' | 'COUNTRY' | 'TENANT' | 'ENVIRONMENT';
export const scopeRank: Record<Scope, number> = { GLOBAL: 0, COUNTRY: 1, TENANT: 2, ENVIRONMENT: 3 };

export interface ConfigRow {
  id: string;
  tenant_id: string | null;
  scope: Scope;
  scope_ref: string;
  key: string;
  value: unknown;
  version: number;
  status: 'ACTIVE' | 'INACTIVE' | 'SUPERSEDED';
  promoted_from: string | null;
  created_by: string;
  created_at: Date;
  updated_at: Date;
}
export const configCols =
  'id, tenant_id, scope, scope_ref, key, value, version, status, promoted_from, created_by, created_at, updated_at';

export const configView = (r: ConfigRow) => ({
  ...r,
  created_at: r.created_at.toISOString(),
  updated_at: r.updated_at.toISOString(),
});

/** Rows a tenant may see: platform rows and its own. */
export async function getConfig(
  q: Queryable,
  tenantId: string,
  id: string,
  lock = false,
): Promise<ConfigRow> {
  const { rows } = await q.query<ConfigRow>(
    `SELECT ${configCols} FROM admin_configs WHERE id = $1 AND (tenant_id IS NULL OR tenant_id = $2)${lock ? ' FOR UPDATE' : ''}`,
    [id, tenantId],
  );
  const row = rows[0];
  if (!row) throw new AppError('CONFIG_NOT_FOUND', `no config ${id}`);
  return row;
}

/** GLOBAL and COUNTRY configs, which every tenant inherits, are written by platform administrators only. */
export function requirePlatformConfigWriter(q: Queryable, tenantId: string): Promise<void> {
  return requirePlatformAdminTenant(
    q,
    tenantId,
    'write GLOBAL or COUNTRY configs, which every tenant inherits',
  );
}

/** Check scope and scopeRef against the caller's tenant; returns the normalised ref. */
export async function checkScope(
  q: Queryable,
  tenantId: string,
  scope: Scope,
  scopeRef: string | undefined,
): Promise<string> {
  // GLOBAL and COUNTRY rows are every tenant's (ownerOf: no tenant): platform administrators' alone.
  if (scope === 'GLOBAL' || scope === 'COUNTRY') await requirePlatformConfigWriter(q, tenantId);
  if (scope === 'GLOBAL') {
    if (scopeRef) throw new AppError('CONFIG_INVALID', 'GLOBAL configs take no scopeRef');
    return '';
  }
  if (scope === 'TENANT') {
    if (scopeRef !== undefined && scopeRef !== tenantId)
      throw new AppError('CONFIG_INVALID', "a TENANT config's scopeRef is the caller's tenant");
    return tenantId;
  }
  if (!scopeRef) throw new AppError('CONFIG_INVALID', `${scope} configs need a scopeRef`);
  if (scope === 'COUNTRY') {
    const { rows } = await q.query('SELECT 1 FROM admin_countries WHERE code = $1', [scopeRef]);
    if (!rows[0]) throw new AppError('COUNTRY_NOT_FOUND', `country ${scopeRef} is not enabled`);
    return scopeRef;
  }
  const { rows } = await q.query('SELECT 1 FROM admin_environments WHERE tenant_id = $1 AND id::text = $2', [
    tenantId,
    scopeRef,
  ]);
  if (!rows[0]) throw new AppError('ENVIRONMENT_NOT_FOUND', `no environment ${scopeRef} in this tenant`);
  return scopeRef;
}

export const ownerOf = (tenantId: string, scope: Scope): string | null =>
  scope === 'GLOBAL' || scope === 'COUNTRY' ? null : tenantId;

export interface NewVersion {
  owner: string | null;
  scope: Scope;
  scopeRef: string;
  key: string;
  value: unknown;
  activate: boolean;
  createdBy: string;
  promotedFrom?: string | null;
}

/** Next version of a key (serialised per key by an advisory lock); activating supersedes the active one. */
export async function newVersion(q: Queryable, n: NewVersion): Promise<ConfigRow> {
  const lockKey = `${n.owner ?? ''}|${n.scope}|${n.scopeRef}|${n.key}`;
  await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', [lockKey]);
  const { rows: maxRows } = await q.query<{ v: number | null }>(
    `SELECT max(version) AS v FROM admin_configs WHERE coalesce(tenant_id, '') = $1 AND scope = $2 AND scope_ref = $3 AND key = $4`,
    [n.owner ?? '', n.scope, n.scopeRef, n.key],
  );
  if (n.activate) {
    await q.query(
      `UPDATE admin_configs SET status = 'SUPERSEDED', updated_at = now()
        WHERE coalesce(tenant_id, '') = $1 AND scope = $2 AND scope_ref = $3 AND key = $4 AND status = 'ACTIVE'`,
      [n.owner ?? '', n.scope, n.scopeRef, n.key],
    );
  }
  const { rows } = await q.query<ConfigRow>(
    `INSERT INTO admin_configs (id, tenant_id, scope, scope_ref, key, value, version, status, promoted_from, created_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING ${configCols}`,
    [
      uuidv7(),
      n.owner,
      n.scope,
      n.scopeRef,
      n.key,
      JSON.stringify(n.value),
      (maxRows[0]?.v ?? 0) + 1,
      n.activate ? 'ACTIVE' : 'INACTIVE',
      n.promotedFrom ?? null,
      n.createdBy,
    ],
  );
  const row = rows[0];
  if (!row) throw new AppError('INTERNAL', 'config insert returned nothing');
  return row;
}

export interface Context {
  tenantId: string;
  envId?: string | undefined;
  country?: string | undefined;
}
export interface Candidate {
  scope: Scope;
  scope_ref: string;
  key: string;
  value: unknown;
}
export interface Resolved {
  key: string;
  value: unknown;
  scope: Scope;
  scope_ref: string;
  config_id: string | null;
  version: number | null;
}

/** Effective values for a context; `candidates` (dry-run) replace the active value at their scope. */
export async function resolveEffective(
  q: Queryable,
  c: Context,
  keys?: string[],
  candidates: Candidate[] = [],
): Promise<{ context: Record<string, string | null>; values: Resolved[] }> {
  const { rows: t } = await q.query<{ country: string }>('SELECT country FROM tenants WHERE id = $1', [
    c.tenantId,
  ]);
  const country = c.country ?? t[0]?.country ?? null;
  const { rows } = await q.query<ConfigRow>(
    `SELECT ${configCols} FROM admin_configs WHERE status = 'ACTIVE' AND ($4::text[] IS NULL OR key = ANY($4))
        AND ((scope = 'GLOBAL') OR (scope = 'COUNTRY' AND scope_ref = $2)
             OR (scope = 'TENANT' AND tenant_id = $1 AND scope_ref = $1) OR (scope = 'ENVIRONMENT' AND tenant_id = $1 AND scope_ref = $3))`,
    [c.tenantId, country, c.envId ?? null, keys ?? null],
  );
  const applies = (x: { scope: Scope; scope_ref: string }) =>
    x.scope === 'GLOBAL' ||
    (x.scope === 'COUNTRY' && x.scope_ref === country) ||
    (x.scope === 'TENANT' && x.scope_ref === c.tenantId) ||
    (x.scope === 'ENVIRONMENT' && x.scope_ref === c.envId);
  const all: Resolved[] = rows.map((r) => ({
    key: r.key,
    value: r.value,
    scope: r.scope,
    scope_ref: r.scope_ref,
    config_id: r.id,
    version: r.version,
  }));
  for (const cand of candidates) {
    if (!applies(cand) || (keys && !keys.includes(cand.key))) continue;
    const i = all.findIndex((r) => r.key === cand.key && r.scope === cand.scope);
    const v: Resolved = {
      key: cand.key,
      value: cand.value,
      scope: cand.scope,
      scope_ref: cand.scope_ref,
      config_id: null,
      version: null,
    };
    if (i >= 0) all[i] = v;
    else all.push(v);
  }
  const best = new Map<string, Resolved>();
  for (const r of all) {
    const cur = best.get(r.key);
    if (!cur || scopeRank[r.scope] > scopeRank[cur.scope]) best.set(r.key, r);
  }
  return {
    context: { tenantId: c.tenantId, envId: c.envId ?? null, country },
    values: [...best.values()].sort((a, b) => a.key.localeCompare(b.key)),
  };
}
