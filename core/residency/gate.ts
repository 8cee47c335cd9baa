/**
 * Issue 20 item 2: a core serves a tenant only while that tenant's data may live where this
 * core's database is (SPEC 2.10 `resident_regions` names the cluster's region, or is unset).
 * Otherwise every request for it is refused 421 TENANT_NOT_RESIDENT (fail closed), counted, and
 * audited under `_platform` (the operator's chain: nothing more is written into the tenant's own
 * data on a cluster where it may not live). Placements are cached and dropped by NOTIFY
 * `tenants_changed` (a tenant's id, or empty after a relabel); while the listener is down
 * nothing is cached, so a change is never missed.
 */
import { Counter, Gauge } from 'prom-client';
import type { Logger } from 'pino';
import { audit } from '../../shared/audit.ts';
import { Listener } from '../../shared/db/listener.ts';
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { channels } from '../../shared/notify.ts';
import { clusterRegion, labelCluster } from './cluster.ts';

export interface ResidencyOptions {
  /** DEPLOYMENT_REGION: where this core runs (reported beside the cluster's region). */
  deploymentRegion: string;
  /** Development and tests: label an unlabelled cluster with deploymentRegion (production: `npm run migrate` does). */
  labelUnlabelled: boolean;
}

/** Who asked, for the audit record. */
export interface Asker {
  principalId: string | undefined;
  method: string;
  route: string;
  requestId: string;
}

/** A tenant's placement: its resident regions, or null when it set none (no restriction). */
type Placement = { regions: readonly string[] | null; malformed: boolean };

/** Even with the listener up, an entry is re-read after this long (a safety net, like the edge's). */
const entryTtlMs = 30_000;
/** Reconnect attempts of a lost listener are at least this far apart. */
const reconnectEveryMs = 5_000;

export class ResidencyGate {
  private region: string | undefined;
  private readonly placements = new Map<string, Placement & { at: number }>();
  /** Bumped on every notification: a read that started before one is not cached. */
  private generation = 0;
  private readonly listener: Listener;
  /** The database region last warned about (a differing DEPLOYMENT_REGION is said once, not per request). */
  private warnedFor: string | undefined;
  private readonly refusals: Counter<'tenant'>;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    metrics: Metrics,
    private readonly opts: ResidencyOptions,
    private readonly now: () => number = Date.now,
  ) {
    this.listener = new Listener(
      db,
      log,
      {
        name: 'residency listener',
        whileDown: 'placements are read per request',
        channels: [channels.tenants],
        reconnectEveryMs,
        now,
      },
      {
        onNotify: (_channel, payload) => this.drop(payload),
        // Anything may have changed before we listened.
        onListening: () => this.drop(''),
        onLost: () => this.drop(''),
      },
    );
    const registry = metrics.registry;
    this.refusals =
      (registry.getSingleMetric('tenant_residency_refusals_total') as Counter<'tenant'> | undefined) ??
      new Counter({
        name: 'tenant_residency_refusals_total',
        help: "Requests refused because the tenant's resident_regions exclude this core's database region (issue 20 item 2)",
        labelNames: ['tenant'] as const,
        registers: [registry],
      });
    if (!registry.getSingleMetric('core_data_region_info')) {
      const gate = this;
      new Gauge({
        name: 'core_data_region_info',
        help: "This core's DEPLOYMENT_REGION and its database cluster's region label (1)",
        labelNames: ['deployment_region', 'database_region'] as const,
        registers: [registry],
        collect() {
          this.reset();
          this.set(
            { deployment_region: gate.opts.deploymentRegion, database_region: gate.region ?? 'unlabelled' },
            1,
          );
        },
      });
    }
  }

  /** Whether placements are being cached (the LISTEN connection is up). */
  get listening(): boolean {
    return this.listener.listening;
  }

  /** This cluster's region (cached; labelled first where allowed), or undefined while unlabelled. */
  async clusterRegion(): Promise<string | undefined> {
    this.listener.ensure();
    if (this.region !== undefined) return this.region;
    const generation = this.generation;
    const region = this.opts.labelUnlabelled
      ? await labelCluster(this.db, this.opts.deploymentRegion, 'core')
      : await clusterRegion(this.db);
    if (region !== undefined && region !== this.opts.deploymentRegion && region !== this.warnedFor) {
      this.warnedFor = region;
      this.log.warn(
        { deploymentRegion: this.opts.deploymentRegion, databaseRegion: region },
        'this core runs in another region than its database cluster',
      );
    }
    if (this.cacheable(generation)) this.region = region;
    return region;
  }

  /** Refuse (421 TENANT_NOT_RESIDENT) when any of `tenantIds` may not live on this cluster. */
  async check(tenantIds: readonly string[], asker: Asker): Promise<void> {
    if (tenantIds.length === 0) return;
    const region = await this.clusterRegion();
    for (const tenantId of new Set(tenantIds)) {
      const p = await this.placement(tenantId);
      if (p.regions === null && !p.malformed) continue;
      // Unlabelled cluster, or a value that is no list of regions: nothing proves the data may be here.
      if (region !== undefined && !p.malformed && p.regions?.includes(region)) continue;
      await this.refuse(tenantId, region, p, asker);
    }
  }

  private async placement(tenantId: string): Promise<Placement> {
    const cached = this.placements.get(tenantId);
    if (cached && this.now() - cached.at < entryTtlMs) return cached;
    const generation = this.generation;
    const { rows } = await this.db.query<{ r: unknown }>(
      `SELECT security -> 'resident_regions' AS r FROM tenants WHERE id = $1`,
      [tenantId],
    );
    // No such tenant holds no data here: the route answers for it (404 and the like).
    if (rows.length === 0) return { regions: null, malformed: false };
    const r = rows[0]?.r ?? null;
    const regions = Array.isArray(r) && r.every((x) => typeof x === 'string') ? (r as string[]) : null;
    const p: Placement = { regions, malformed: r !== null && regions === null };
    if (this.cacheable(generation)) this.placements.set(tenantId, { ...p, at: this.now() });
    return p;
  }

  private async refuse(
    tenantId: string,
    region: string | undefined,
    p: Placement,
    asker: Asker,
  ): Promise<never> {
    this.refusals.inc({ tenant: tenantId });
    const attrs = {
      database_region: region ?? null,
      deployment_region: this.opts.deploymentRegion,
      resident_regions: p.regions ?? 'malformed',
      method: asker.method,
      route: asker.route,
      request_id: asker.requestId,
    };
    this.log.error(
      { tenantId, ...attrs },
      'tenant refused: its resident_regions do not allow this database cluster',
    );
    // Fail closed whether or not the record is written; a lost record is logged above.
    await audit(this.db, {
      tenantId: '_platform',
      actor: { type: asker.principalId ? 'principal' : 'anonymous', id: asker.principalId ?? 'anonymous' },
      action: 'tenant.residency_refused',
      target: { type: 'tenant', id: tenantId },
      decision: { allow: false, code: 'TENANT_NOT_RESIDENT' },
      attrs,
    }).catch((err: unknown) =>
      this.log.error({ err: (err as Error).message, tenantId }, 'residency refusal not audited'),
    );
    throw new AppError(
      'TENANT_NOT_RESIDENT',
      `tenant ${tenantId} cannot be served here: its data may not live in this deployment's database region (the operator has been alerted)`,
    );
  }

  private cacheable(generation: number): boolean {
    return this.listener.listening && generation === this.generation;
  }

  private drop(payload: string): void {
    this.generation++;
    if (payload === '') {
      this.region = undefined;
      this.placements.clear();
    } else {
      this.placements.delete(payload);
    }
  }

  async close(): Promise<void> {
    await this.listener.close();
  }
}
