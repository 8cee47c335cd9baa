/**
 * build(deps) for the core service: every domain contributes its routes here, and the HTTP
 * pipeline, the OpenAPI document and the route list all come from that one array.
 */
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import type { Db } from '../shared/db/pool.ts';
import type { KeyStore } from './keys/keys.ts';
import { buildOpenApi } from './http/openapi.ts';
import type { AccessLookup } from './http/openapi-security.ts';
import type { DocExamples } from './http/openapi-examples.ts';
import type { RouteSpec } from './http/route.ts';
import { createCoreServer } from './http/server.ts';
import type { BuildInfo } from './platform/build-info.ts';
import type { Metrics } from '../shared/metrics.ts';
import { platformRoutes } from './platform/routes.ts';
import { authzRoutes } from './authz/routes.ts';
import { apiKeyRoutes } from './apikeys/routes.ts';
import { releaseEdgeCount } from './apikeys/budget.ts';
import { paymentRoutes } from './payments/routes.ts';
import type { PolicyStore } from '../policy/runtime/store.ts';
import { Ledger, ledgerRoutes } from './ledger/routes.ts';
import { oauthRoutes } from './oauth/routes.ts';
import { discoveryRoutes } from './oauth/discovery.ts';
import { oauthClientRoutes } from './oauth/registration.ts';
import { identityDeps, type IdentityOptions } from './identity/context.ts';
import { identityRoutes } from './identity/routes.ts';
import { adminRoutes } from './admin/routes.ts';
import type { RateLimits } from './admin/rate-limit.ts';
import { agentRoutes } from './agents/routes.ts';
import { oversightRoutes } from './oversight/routes.ts';
import { scimRoutes } from './staff/scim/routes.ts';
import { createEnrolmentLink } from './staff/enrolment.ts';
import type { ScimDeps } from './staff/scim/users.ts';
import { staffTokenRoutes } from './staff/refresh.ts';
import { federationLoginMethod, federationRoutes } from './staff/federation-routes.ts';
import { TargetGuard } from './admin/webhooks/target.ts';
import { staffAuthRoutes } from './staff/routes.ts';
import { staffPageRoutes } from './staff/page.ts';
// Issue 22: candidate bundles and the impact of a candidate on recorded decisions.
import { policyImpactRoutes } from './policy/routes.ts';
import type { WebAuthnConfig } from './staff/webauthn.ts';
import { ResidencyGate, type ResidencyOptions } from './residency/gate.ts';
import { developmentRegion } from './residency/cluster.ts';
import { CurrencySync } from './admin/reference/currency-sync.ts';
import { KeySync } from './keys/key-sync.ts';

/** Development default: browsers accept `localhost` as an RP ID (never an IP address). */
export const defaultWebAuthn = (): WebAuthnConfig => ({
  rpId: 'localhost',
  rpName: 'Payments platform staff',
  origins: ['http://localhost'],
});

export interface CoreDeps {
  db: Db;
  log: Logger;
  metrics: Metrics;
  build: BuildInfo;
  keys: KeyStore;
  /** Development files (e.g. the SMS inbox) live here; unset in tests and production. */
  dataDir?: string;
  /**
   * Identity headers count only on requests carrying one of these in `x-edge-auth`: the current
   * EDGE_SHARED_SECRET, then the previous one while it rotates. Required, at least one.
   */
  edgeSecrets: readonly string[];
  /** Policy revisions for the simulate endpoints (the edge's store when in one process). */
  policies?: PolicyStore;
  /** The edge's warmth when in one process (issue 15 item 9: /v1/ready waits for it). */
  edgeWarm?: () => boolean;
  now?: () => number;
  /** Identity options (tests inject a capturing SMS sender). */
  identity?: IdentityOptions;
  /** Administration API rate limits (tests lower them). */
  adminRateLimits?: RateLimits;
  /** Webhook SSRF guard: let private/loopback targets through (tests and the development stack only). */
  webhookAllowPrivateTargets?: boolean;
  /** Private CIDRs an operator lists as internal webhook receivers (PRIVATE_TARGETS_ALLOWED). */
  webhookAllowedCidrs?: string[];
  /** Tests only (issue 15 item 4): every response is checked against its declared schema (core/http/response-check.ts). */
  checkResponses?: boolean;
  /** Tests only: how long a page of replayed decisions may take before its impact job fails (default 20 s). */
  impactPageDeadlineMs?: number;
  /** Called in the transaction that provisions a staff member over SCIM (issue 16: enrolment links). */
  onStaffProvisioned?: ScimDeps['onProvisioned'];
  /**
   * Staff passkeys' relying party (WEBAUTHN_RP_ID, WEBAUTHN_ORIGINS). Read on every ceremony, so
   * the development stack can add the gateway's origin once its port is known.
   */
  webauthn?: WebAuthnConfig;
  /**
   * Issue 20 item 2: DEPLOYMENT_REGION and whether this core may label an unlabelled database
   * cluster with it (development and tests; production's `npm run migrate` labels it). Default:
   * the development region, labelling allowed.
   */
  residency?: ResidencyOptions;
  /**
   * Issue 15 item 3: the edge's route table as the OpenAPI document needs it (each operation's
   * credential, purpose and action), given by the composition root, since core never imports edge/.
   */
  routeAccess?: AccessLookup;
  /** Development only: demo values the docs page pre-fills, by parameter or property name. */
  docExamples?: DocExamples;
}

export interface Core {
  server: Server;
  routes: RouteSpec[];
  /** Which tenants this core may serve, by the cluster's region (core/residency/gate.ts). */
  residency: ResidencyGate;
  /** Drops `keys`' cached tenant keys when any core changes them (NOTIFY keys_changed, core/keys/key-sync.ts). */
  keyChanges: KeySync;
}

/** The OpenAPI document of `routes`, built again only when the registry version changes. */
function openApiDocument(deps: CoreDeps, routes: RouteSpec[]): () => unknown {
  // Built once per registry version: the registry says which operations need a step-up or take API keys.
  let openapi: { registryVersion: string | undefined; doc: unknown } | undefined;
  return () => {
    const registry = deps.policies?.current;
    if (!openapi || openapi.registryVersion !== registry?.registryVersion) {
      openapi = {
        registryVersion: registry?.registryVersion,
        doc: buildOpenApi(routes, {
          version: deps.build.version,
          registry: registry?.registry,
          ...(deps.routeAccess ? { access: deps.routeAccess } : {}),
          ...(deps.docExamples ? { examples: deps.docExamples } : {}),
        }),
      };
    }
    return openapi.doc;
  };
}

/** What SCIM provisioning does in its transaction: the caller's hook, else an enrolment link. */
function onStaffProvisioned(deps: CoreDeps, now: () => number): NonNullable<ScimDeps['onProvisioned']> {
  // Issue 16 item 1: a member provisioned over SCIM gets a one-time passkey enrolment link.
  // A member provisioned inactive gets none: an Admin issues one once they are activated.
  return (
    deps.onStaffProvisioned ??
    (async (q, user, actor) => {
      if (!user.active) return undefined;
      const link = await createEnrolmentLink(q, user.tenantId, user.id, { type: 'scim', id: actor }, now());
      return { enrolmentPath: link.path, expiresAt: link.expiresAt };
    })
  );
}

/** The HTTP server over every route, behind the residency gate of this core's region. */
function serveRoutes(deps: CoreDeps, routes: RouteSpec[]): { server: Server; residency: ResidencyGate } {
  const residency = new ResidencyGate(
    deps.db,
    deps.log.child({ component: 'residency' }),
    deps.metrics,
    deps.residency ?? { deploymentRegion: developmentRegion, labelUnlabelled: true },
  );
  const server = createCoreServer({
    routes,
    log: deps.log,
    metrics: deps.metrics,
    edgeSecrets: deps.edgeSecrets,
    releaseBudget: (scope) => releaseEdgeCount(deps.db, scope),
    checkResponses: deps.checkResponses ?? false,
    residency: (tenantIds, asker) => residency.check(tenantIds, asker),
  });
  return { server, residency };
}

/**
 * The ledger's batcher, the impact runner and the currency reloads start now, the currency and
 * key listeners once the server listens (building a core for its routes opens no connection), and
 * all stop with the server.
 */
function startBackgroundWork(
  deps: CoreDeps,
  server: Server,
  w: { ledger: Ledger; impact: ReturnType<typeof policyImpactRoutes>; residency: ResidencyGate },
): KeySync {
  w.ledger.start();
  w.impact.runner?.start();
  const currencies = new CurrencySync(deps.db, deps.log.child({ component: 'currencies' }));
  currencies.start();
  const keyChanges = new KeySync(deps.db, deps.log.child({ component: 'keys' }), deps.keys);
  server.once('listening', () => {
    currencies.listen();
    keyChanges.listen();
  });
  server.on('close', () => {
    void currencies.close();
    void keyChanges.close();
    w.ledger.stop();
    void w.residency.close();
    void w.impact.runner?.stop();
  });
  return keyChanges;
}

/** Staff sign-in (passkeys and the tenant's identity providers) and the staff pages. */
function staffSignInRoutes(
  deps: CoreDeps,
  now: () => number,
  federation: Parameters<typeof federationLoginMethod>[0],
): RouteSpec[] {
  return [
    ...staffAuthRoutes(
      {
        db: deps.db,
        keys: deps.keys,
        now,
        log: deps.log.child({ component: 'staff' }),
        webauthn: deps.webauthn ?? defaultWebAuthn(),
      },
      [federationLoginMethod(federation)],
    ),
    ...staffPageRoutes(),
  ];
}

export function buildCore(deps: CoreDeps): Core {
  const now = deps.now ?? Date.now;
  const routes: RouteSpec[] = [];
  const document = openApiDocument(deps, routes);
  routes.push(
    ...platformRoutes({
      db: deps.db,
      metrics: deps.metrics,
      build: deps.build,
      startedAt: now(),
      now,
      ...(deps.edgeWarm ? { edgeWarm: deps.edgeWarm } : {}),
      openapi: document,
    }),
  );
  const identity = identityDeps(
    { db: deps.db, keys: deps.keys, log: deps.log, now, dataDir: deps.dataDir },
    deps.identity,
  );
  routes.push(...identityRoutes(identity), ...staffTokenRoutes(identity));
  // Agents share identity's PinHasher (one argon2 semaphore), secrets and SMS sender.
  routes.push(
    ...agentRoutes({
      db: deps.db,
      keys: deps.keys,
      log: deps.log.child({ component: 'agents' }),
      now,
      identity,
    }),
  );
  const ledger = new Ledger({ db: deps.db, log: deps.log, now, keys: deps.keys });
  routes.push(
    ...oauthRoutes({ db: deps.db, keys: deps.keys, now }),
    ...discoveryRoutes({ keys: deps.keys }),
    ...oauthClientRoutes({ db: deps.db, keys: deps.keys, now }),
    ...ledgerRoutes({ db: deps.db, keys: deps.keys, log: deps.log, now, ledger }),
  );
  routes.push(...authzRoutes({ policies: deps.policies, log: deps.log.child({ component: 'simulate' }) }));
  // One SSRF guard for every outbound target an administrator names: webhooks and identity providers.
  const targets = new TargetGuard({
    allowPrivateTargets: deps.webhookAllowPrivateTargets ?? false,
    allowedCidrs: deps.webhookAllowedCidrs ?? [],
  });
  routes.push(
    ...adminRoutes({
      db: deps.db,
      keys: deps.keys,
      now,
      ...(deps.adminRateLimits ? { rateLimits: deps.adminRateLimits } : {}),
      targets,
      identity,
    }),
  );
  const federation = { db: deps.db, keys: deps.keys, guard: targets, now };
  routes.push(...federationRoutes(federation));
  routes.push(...apiKeyRoutes({ db: deps.db, keys: deps.keys }));
  routes.push(...scimRoutes({ db: deps.db, now, onProvisioned: onStaffProvisioned(deps, now) }));
  routes.push(...paymentRoutes({ db: deps.db, keys: deps.keys, now, policies: deps.policies }));
  routes.push(...oversightRoutes({ db: deps.db, keys: deps.keys, now }));
  // Issue 22 item 2: replay jobs run in this core, off the request path (core/policy/impact.ts).
  const impact = policyImpactRoutes({
    db: deps.db,
    policies: deps.policies,
    log: deps.log.child({ component: 'policy-impact' }),
    now,
    ...(deps.impactPageDeadlineMs === undefined ? {} : { pageDeadlineMs: deps.impactPageDeadlineMs }),
  });
  routes.push(...impact.routes);
  routes.push(...staffSignInRoutes(deps, now, federation));
  const { server, residency } = serveRoutes(deps, routes);
  const keyChanges = startBackgroundWork(deps, server, { ledger, impact, residency });
  return { server, routes, residency, keyChanges };
}
