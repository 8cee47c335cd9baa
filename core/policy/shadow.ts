/**
 * A tenant's shadow candidate (issue 22 item 3): set, read with its latest divergences, cleared.
 * The edges re-read policy_shadows every 2 s (edge/shadow.ts) and evaluate the tenant's live
 * decisions against it off the decision path; promoting it is the ordinary hot swap.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { Queryable } from '../../shared/db/pool.ts';

export const Shadow = Type.Object({
  policy_ref: Type.String(),
  set_by: Type.String(),
  set_at: Type.String({ format: 'date-time' }),
});
export type Shadow = Static<typeof Shadow>;

export const Divergence = Type.Object({
  policy_ref: Type.String(),
  recorded_at: Type.String({ format: 'date-time' }),
  decision_id: Type.String(),
  purpose: Type.String(),
  route: Type.String(),
  live_allow: Type.Boolean(),
  shadow_allow: Type.Union([Type.Boolean(), Type.Null()]),
  shadow_code: Type.String(),
  /** Scrubbed as recorded decision inputs are: no secrets, personal identifiers pseudonymised. */
  input: Type.Unknown(),
});
export const ShadowView = Type.Object({
  shadow: Type.Union([Shadow, Type.Null()]),
  divergences: Type.Array(Divergence),
});

/** Divergences shown with the shadow (newest first). */
const shownDivergences = 50;

export async function setShadow(q: Queryable, tenantId: string, ref: string, setBy: string): Promise<Shadow> {
  const { rows } = await q.query<{ set_at: Date }>(
    `INSERT INTO policy_shadows (tenant_id, candidate_ref, set_by) VALUES ($1, $2, $3)
     ON CONFLICT (tenant_id) DO UPDATE SET candidate_ref = EXCLUDED.candidate_ref, set_by = EXCLUDED.set_by, set_at = now() RETURNING set_at`,
    [tenantId, ref, setBy],
  );
  return { policy_ref: ref, set_by: setBy, set_at: (rows[0] as { set_at: Date }).set_at.toISOString() };
}

/** True when there was a shadow to clear. */
export async function clearShadow(q: Queryable, tenantId: string): Promise<boolean> {
  return ((await q.query('DELETE FROM policy_shadows WHERE tenant_id = $1', [tenantId])).rowCount ?? 0) > 0;
}

export async function shadowView(q: Queryable, tenantId: string): Promise<Static<typeof ShadowView>> {
  const s = (
    await q.query<{ candidate_ref: string; set_by: string; set_at: Date }>(
      'SELECT candidate_ref, set_by, set_at FROM policy_shadows WHERE tenant_id = $1',
      [tenantId],
    )
  ).rows[0];
  const { rows } = await q.query<{
    candidate_ref: string;
    recorded_at: Date;
    decision_id: string;
    purpose: string;
    route: string;
    live_allow: boolean;
    shadow_allow: boolean | null;
    shadow_code: string;
    input: unknown;
  }>(
    `SELECT candidate_ref, recorded_at, decision_id, purpose, route, live_allow, shadow_allow, shadow_code, input FROM policy_shadow_divergences
     WHERE tenant_id = $1 ORDER BY id DESC LIMIT $2`,
    [tenantId, shownDivergences],
  );
  return {
    shadow: s ? { policy_ref: s.candidate_ref, set_by: s.set_by, set_at: s.set_at.toISOString() } : null,
    divergences: rows.map((r) => ({
      policy_ref: r.candidate_ref,
      recorded_at: r.recorded_at.toISOString(),
      decision_id: r.decision_id,
      purpose: r.purpose,
      route: r.route,
      live_allow: r.live_allow,
      shadow_allow: r.shadow_allow,
      shadow_code: r.shadow_code,
      input: r.input,
    })),
  };
}
