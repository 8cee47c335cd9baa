/**
 * The database cluster's own region label (migration 0900, issue 20 item 2): the database says
 * where it is, so a core never has to trust a variable about a database it merely connects to.
 */
import type { Queryable } from '../../shared/db/pool.ts';

/** ISO 3166 alpha-2, the codes of SPEC 2.10 `resident_regions`. */
export const regionPattern = /^[A-Z]{2}$/;

/** The region that labels a development cluster when none is configured (the demo tenant is Kenyan). */
export const developmentRegion = 'KE';

/** This cluster's region, or undefined while it has no label. */
export async function clusterRegion(q: Queryable): Promise<string | undefined> {
  const { rows } = await q.query<{ region: string }>('SELECT region FROM cluster_identity');
  return rows[0]?.region;
}

/**
 * Label an unlabelled cluster with `region` (by whom: `migrate`, `core`, `stack`) and return the
 * cluster's region, which stays what it was when already labelled: relabelling is an operator's
 * deliberate act, never a side effect of a deployment pointing at the wrong database.
 */
export async function labelCluster(q: Queryable, region: string, by: string): Promise<string> {
  if (!regionPattern.test(region))
    throw new Error(`a cluster region is an ISO 3166 alpha-2 code, not ${JSON.stringify(region)}`);
  await q.query(
    'INSERT INTO cluster_identity (region, labelled_by) VALUES ($1, $2) ON CONFLICT (singleton) DO NOTHING',
    [region, by],
  );
  return (await clusterRegion(q)) ?? region;
}
