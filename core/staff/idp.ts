/**
 * A tenant's OpenID Connect identity provider for staff sign-in (issue 14 item 1-2), through the
 * administration API (Admin): `PUT /v1/identity-provider` and `GET /v1/identity-provider`.
 * - The issuer's discovery document is fetched when the configuration is written, through the
 *   SSRF guard webhooks use (core/admin/webhooks/target.ts): an issuer at (or resolving to) a
 *   loopback, private, link-local or metadata address is refused unless the operator listed it
 *   (PRIVATE_TARGETS_ALLOWED) or the guard allows private targets (tests, development). Every
 *   later request to the provider (token, JWKS) goes through the same guard.
 * - Plain http issuers are accepted only where private targets are (tests, development).
 * - The client secret is sealed with the master key and never returned (GET says `hasClientSecret`);
 *   a PUT without `clientSecret` keeps the stored one.
 * - Audited (without the secret) in the same transaction.
 */
import { Type } from '@sinclair/typebox';
import * as oidc from 'openid-client';
import { fetch as undiciFetch } from 'undici';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { adminRoute, type AdminDeps } from '../admin/http.ts';
import { TargetRefused, type TargetGuard } from '../admin/webhooks/target.ts';
import type { RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { IdentityProviderView } from './schemas.ts';
import { declared } from '../http/declared.ts';

export interface IdentityProvider {
  tenantId: string;
  issuer: string;
  clientId: string;
  clientSecret: string;
  scopes: string[];
  groupsClaim: string;
  redirectUri: string;
  version: number;
}

interface Row {
  tenant_id: string;
  issuer: string;
  client_id: string;
  client_secret_enc: Buffer;
  scopes: string[];
  groups_claim: string;
  redirect_uri: string;
  version: number;
  updated_at: Date;
}

const aadOf = (tenantId: string) => `idp:${tenantId}`;

export async function identityProviderOf(
  q: Queryable,
  keys: KeyStore,
  tenantId: string,
): Promise<IdentityProvider | undefined> {
  const { rows } = await q.query<Row>('SELECT * FROM staff_identity_providers WHERE tenant_id = $1', [
    tenantId,
  ]);
  const r = rows[0];
  if (!r) return undefined;
  return {
    tenantId: r.tenant_id,
    issuer: r.issuer,
    clientId: r.client_id,
    clientSecret: keys.openSecret(r.client_secret_enc, aadOf(tenantId)).toString('utf8'),
    scopes: r.scopes,
    groupsClaim: r.groups_claim,
    redirectUri: r.redirect_uri,
    version: r.version,
  };
}

function publicView(r: Row) {
  return {
    issuer: r.issuer,
    clientId: r.client_id,
    hasClientSecret: true,
    scopes: r.scopes,
    groupsClaim: r.groups_claim,
    redirectUri: r.redirect_uri,
    version: r.version,
    updatedAt: r.updated_at.toISOString(),
  };
}

/**
 * The fetch openid-client uses for everything it asks the provider: the guard's dispatcher
 * resolves names and refuses bad addresses at connect time; IP literals are checked here.
 */
export function guardedFetch(guard: TargetGuard): oidc.CustomFetch {
  return async (url, options) => {
    const refusal = guard.deliveryRefusal(new URL(url));
    if (refusal) throw new Error(refusal);
    const res = await undiciFetch(url, {
      method: options.method,
      headers: options.headers as Record<string, string>,
      body: options.body as string | undefined,
      redirect: 'manual',
      signal: options.signal ?? AbortSignal.timeout(5000),
      dispatcher: guard.dispatcher(),
    });
    return res as unknown as Response;
  };
}

/** The provider's configuration for openid-client (discovery through the guard). */
export async function discover(
  guard: TargetGuard,
  idp: Pick<IdentityProvider, 'issuer' | 'clientId' | 'clientSecret'>,
): Promise<oidc.Configuration> {
  const issuer = new URL(idp.issuer);
  await guard.check(issuer);
  const insecure = issuer.protocol === 'http:';
  if (insecure && !guard.allowPrivate)
    throw new TargetRefused(issuer.hostname, 'scheme', 'the issuer must be https');
  const config = await oidc.discovery(
    issuer,
    idp.clientId,
    { client_secret: idp.clientSecret },
    oidc.ClientSecretPost(idp.clientSecret),
    {
      [oidc.customFetch]: guardedFetch(guard),
      timeout: 5,
      ...(insecure ? { execute: [oidc.allowInsecureRequests] } : {}),
    },
  );
  // openid-client trusts an ID token from the token endpoint on TLS alone (OIDC Core 3.1.3.7);
  // issue 14 asks for its signature to be verified against the provider's keys as well.
  oidc.enableNonRepudiationChecks(config);
  return config;
}

const Url = Type.String({ minLength: 8, maxLength: 2048, pattern: '^https?://' });
const ClaimName = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_:./-]+$' });
const Scope = Type.String({ minLength: 1, maxLength: 64, pattern: '^[\\x21\\x23-\\x5B\\x5D-\\x7E]+$' });
const PutBody = Type.Object(
  {
    issuer: Url,
    clientId: Type.String({ minLength: 1, maxLength: 256 }),
    clientSecret: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
    scopes: Type.Optional(Type.Array(Scope, { minItems: 1, maxItems: 20, uniqueItems: true })),
    groupsClaim: Type.Optional(ClaimName),
    redirectUri: Url,
  },
  { additionalProperties: false },
);

async function checkedDiscovery(
  guard: TargetGuard,
  idp: Pick<IdentityProvider, 'issuer' | 'clientId' | 'clientSecret'>,
): Promise<void> {
  try {
    await discover(guard, idp);
  } catch (err) {
    if (err instanceof TargetRefused)
      throw new AppError('IDP_INVALID', `issuer refused: ${err.message}`, { extra: { reason: err.reason } });
    throw new AppError(
      'IDP_INVALID',
      "the issuer's OpenID Connect discovery document could not be fetched or does not name this issuer",
    );
  }
}

export function identityProviderRoutes(deps: AdminDeps): RouteSpec[] {
  const tags = ['admin.identity-provider'];
  return [
    adminRoute(deps, {
      ...declared('GET', '/v1/identity-provider'),
      operationId: 'getIdentityProvider',
      tags,
      mode: 'read',
      summary: "The tenant's OpenID Connect provider for staff sign-in (never the client secret)",
      responses: { 200: { description: 'The configuration', schema: IdentityProviderView } },
      read: async (_ctx, caller) => {
        const { rows } = await deps.db.query<Row>(
          'SELECT * FROM staff_identity_providers WHERE tenant_id = $1',
          [caller.tenantId],
        );
        if (!rows[0])
          throw new AppError('IDP_NOT_CONFIGURED', 'no identity provider is configured for this tenant');
        return { status: 200, body: publicView(rows[0]) };
      },
    }),
    adminRoute(deps, {
      ...declared('PUT', '/v1/identity-provider'),
      operationId: 'putIdentityProvider',
      tags,
      mode: 'create',
      summary:
        'Configure the OpenID Connect provider (discovery checked through the SSRF guard; secret sealed)',
      body: PutBody,
      responses: { 200: { description: 'The configuration (no secret)', schema: IdentityProviderView } },
      write: async (ctx, w) => {
        const b = ctx.body;
        const tenantId = w.caller.tenantId;
        const before = await identityProviderOf(w.q, deps.keys, tenantId);
        const clientSecret = b.clientSecret ?? before?.clientSecret;
        if (!clientSecret)
          throw new AppError(
            'IDP_INVALID',
            'clientSecret is required when configuring the provider the first time',
          );
        await checkedDiscovery(deps.webhookTargets, { issuer: b.issuer, clientId: b.clientId, clientSecret });
        const scopes = b.scopes ?? ['openid', 'profile', 'email'];
        if (!scopes.includes('openid')) throw new AppError('IDP_INVALID', 'scopes must include openid');
        const { rows } = await w.q.query<Row>(
          `INSERT INTO staff_identity_providers (tenant_id, issuer, client_id, client_secret_enc, scopes, groups_claim, redirect_uri)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (tenant_id) DO UPDATE SET issuer = EXCLUDED.issuer, client_id = EXCLUDED.client_id, client_secret_enc = EXCLUDED.client_secret_enc,
             scopes = EXCLUDED.scopes, groups_claim = EXCLUDED.groups_claim, redirect_uri = EXCLUDED.redirect_uri,
             version = staff_identity_providers.version + 1, updated_at = now()
           RETURNING *`,
          [
            tenantId,
            b.issuer,
            b.clientId,
            deps.keys.sealSecret(Buffer.from(clientSecret, 'utf8'), aadOf(tenantId)),
            scopes,
            b.groupsClaim ?? 'groups',
            b.redirectUri,
          ],
        );
        const row = rows[0] as Row;
        await w.audit(
          'identity_provider.put',
          { type: 'identity_provider', id: tenantId },
          {
            issuer: b.issuer,
            clientId: b.clientId,
            scopes,
            groupsClaim: row.groups_claim,
            redirectUri: b.redirectUri,
            secretChanged: b.clientSecret !== undefined,
          },
        );
        return { status: 200, body: publicView(row) };
      },
    }),
  ];
}
