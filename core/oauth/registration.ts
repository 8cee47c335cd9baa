/**
 * `/v1/oauth-clients` (issue 17 item 1; SPEC 5.4.6): a tenant's admin registers its machine
 * clients: create, list, get, rotate, revoke. Today the admin is an admin service token (staff
 * tokens use the same roles once they exist). A client authenticates by `private_key_jwt`
 * (inline public `jwks`), `tls_client_auth` (certificate subject DN, under a CA the tenant
 * trusts), `self_signed_tls_client_auth` (certificate thumbprint), or, for existing
 * integrations and unless the tenant forbids it, a shared secret, shown once. Every change is
 * audited naming the caller; the table's trigger tells every edge (NOTIFY oauth_clients_changed).
 */
import { tenantAdmin, type AdminActor } from '../http/tenant-admin.ts';
import { Type, type Static } from '@sinclair/typebox';
import { importJWK, type JWK } from 'jose';
import { AppError } from '../../shared/errors.ts';
import { appendAudit } from '../../shared/audit.ts';
import type { Db, Queryable, TxClient } from '../../shared/db/pool.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import {
  authMethods,
  clientColumns,
  clientOf,
  coreScopes,
  hashSecret,
  newClientId,
  newClientSecret,
  secretMethods,
  type AuthMethod,
  type OAuthClient,
} from './clients.ts';
import { oauthTenantPolicy } from './tenant-policy.ts';
import { declared } from '../http/declared.ts';

const maxKeys = 10;
const Jwk = Type.Record(Type.String({ maxLength: 32 }), Type.Unknown(), { maxProperties: 20 });
const Jwks = Type.Object(
  { keys: Type.Array(Jwk, { minItems: 1, maxItems: maxKeys }) },
  { additionalProperties: false },
);
const SubjectDn = Type.String({
  minLength: 3,
  maxLength: 512,
  pattern: '^[A-Za-z0-9.]+=[^\\u0000-\\u001f]+$',
});
const Thumbprint = Type.String({
  pattern: '^[A-Za-z0-9_-]{43}$',
  description: 'x5t#S256: base64url SHA-256 of the certificate (DER)',
});
const Credentials = {
  jwks: Type.Optional(Jwks),
  tls_client_auth_subject_dn: Type.Optional(SubjectDn),
  tls_client_certificate_thumbprint: Type.Optional(Thumbprint),
};
const CreateBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    scopes: Type.Array(Type.Union(coreScopes.map((s) => Type.Literal(s))), {
      minItems: 1,
      maxItems: coreScopes.length,
      uniqueItems: true,
    }),
    token_endpoint_auth_method: Type.Union(authMethods.map((m) => Type.Literal(m))),
    ...Credentials,
  },
  { additionalProperties: false },
);
const RotateBody = Type.Object(Credentials, { additionalProperties: false });
const ClientView = Type.Object({
  client_id: Type.String(),
  name: Type.String(),
  scopes: Type.Array(Type.String()),
  token_endpoint_auth_method: Type.String(),
  jwks: Type.Optional(Jwks),
  tls_client_auth_subject_dn: Type.Optional(Type.String()),
  tls_client_certificate_thumbprint: Type.Optional(Type.String()),
  created_at: Type.String(),
  revoked_at: Type.Union([Type.String(), Type.Null()]),
  client_secret: Type.Optional(Type.String({ description: 'secret methods only: shown once, never again' })),
});
const IdParams = Type.Object({
  id: Type.String({ pattern: '^cc_[a-z0-9][a-z0-9-]{0,62}_[A-Za-z0-9_-]{4,64}$' }),
});

type Ctx = RequestContext<unknown, unknown, unknown>;
type Credentials = Static<typeof RotateBody>;
interface Deps {
  db: Db;
  keys: KeyStore;
  now: () => number;
}

const caller = tenantAdmin;

const invalid = (message: string) => new AppError('OAUTH_CLIENT_INVALID', message);

/** Each key public, of an accepted type and size, and importable (RFC 7517). */
async function checkJwks(jwks: { keys: Record<string, unknown>[] }): Promise<void> {
  for (const [i, key] of jwks.keys.entries()) {
    if ('d' in key || 'k' in key || 'p' in key)
      throw invalid(`jwks.keys[${i}] is a private or symmetric key: register public keys only`);
    const kty = key.kty;
    const ok =
      (kty === 'OKP' && key.crv === 'Ed25519') ||
      (kty === 'EC' && key.crv === 'P-256') ||
      (kty === 'RSA' && typeof key.n === 'string' && key.n.length >= 342);
    if (!ok) throw invalid(`jwks.keys[${i}] must be Ed25519, P-256 or RSA of at least 2048 bits`);
    const alg = kty === 'OKP' ? 'EdDSA' : kty === 'EC' ? 'ES256' : 'PS256';
    try {
      await importJWK(key as JWK, alg);
    } catch {
      throw invalid(`jwks.keys[${i}] is not a valid ${kty} public key`);
    }
  }
}

/** The credential columns for `method`; refuses fields of another method and missing ones. */
async function credentialsFor(
  method: AuthMethod,
  c: Credentials,
): Promise<{ jwks: Credentials['jwks'] | null; subject: string | null; thumbprint: string | null }> {
  const given = {
    jwks: c.jwks ?? null,
    subject: c.tls_client_auth_subject_dn ?? null,
    thumbprint: c.tls_client_certificate_thumbprint ?? null,
  };
  const allowed: Record<AuthMethod, (keyof typeof given)[]> = {
    private_key_jwt: ['jwks'],
    tls_client_auth: ['subject', 'thumbprint'],
    self_signed_tls_client_auth: ['thumbprint'],
    client_secret_basic: [],
    client_secret_post: [],
  };
  const extra = (Object.keys(given) as (keyof typeof given)[]).filter(
    (k) => given[k] !== null && !allowed[method].includes(k),
  );
  if (extra.length > 0) throw invalid(`${method} takes no ${extra.join(', ')}`);
  if (method === 'private_key_jwt') {
    if (!given.jwks)
      throw invalid('private_key_jwt needs jwks (the public keys that sign client assertions)');
    await checkJwks(given.jwks);
  }
  if (method === 'tls_client_auth' && !given.subject && !given.thumbprint)
    throw invalid('tls_client_auth needs tls_client_auth_subject_dn or tls_client_certificate_thumbprint');
  if (method === 'self_signed_tls_client_auth' && !given.thumbprint)
    throw invalid('self_signed_tls_client_auth needs tls_client_certificate_thumbprint');
  return given;
}

function view(c: OAuthClient, secret?: string): Record<string, unknown> {
  return {
    client_id: c.clientId,
    name: c.name,
    scopes: c.scopes,
    token_endpoint_auth_method: c.method,
    ...(c.jwks ? { jwks: c.jwks } : {}),
    ...(c.tlsSubject ? { tls_client_auth_subject_dn: c.tlsSubject } : {}),
    ...(c.tlsThumbprint ? { tls_client_certificate_thumbprint: c.tlsThumbprint } : {}),
    created_at: c.createdAt.toISOString(),
    revoked_at: c.revokedAt?.toISOString() ?? null,
    ...(secret ? { client_secret: secret } : {}),
  };
}

async function audit(
  q: TxClient,
  deps: Deps,
  ctx: Ctx,
  who: { tenantId: string; actor: AdminActor },
  action: string,
  clientId: string,
  attrs: Record<string, unknown>,
): Promise<void> {
  await appendAudit(q, [
    {
      tenantId: who.tenantId,
      actor: { type: who.actor.id.startsWith('staff:') ? 'staff' : 'service', id: who.actor.id },
      action,
      target: { type: 'oauth_client', id: clientId },
      decision: { allow: true, trace_id: ctx.requestId, aal: who.actor.aal },
      attrs: { ...attrs, session_id: who.actor.sessionId ?? null },
      ts: new Date(deps.now()),
    },
  ]);
}

async function load(q: Queryable, tenantId: string, id: string, lock = false): Promise<OAuthClient> {
  const { rows } = await q.query<Parameters<typeof clientOf>[0]>(
    `SELECT ${clientColumns} FROM oauth_clients WHERE tenant_id = $1 AND client_id = $2${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, id],
  );
  if (!rows[0]) throw new AppError('OAUTH_CLIENT_NOT_FOUND', 'no such OAuth client');
  return clientOf(rows[0]);
}

async function refuseForbiddenSecret(q: Queryable, tenantId: string, method: AuthMethod): Promise<void> {
  if (secretMethods.includes(method) && (await oauthTenantPolicy(q, tenantId)).secretsForbidden) {
    throw new AppError(
      'OAUTH_METHOD_FORBIDDEN',
      'this tenant forbids shared-secret client authentication: use private_key_jwt or mutual TLS',
    );
  }
}

async function create(
  deps: Deps,
  ctx: Ctx,
  body: Static<typeof CreateBody>,
): Promise<Record<string, unknown>> {
  const who = caller(ctx);
  const method = body.token_endpoint_auth_method;
  const creds = await credentialsFor(method, body);
  await refuseForbiddenSecret(deps.db, who.tenantId, method);
  const secret = secretMethods.includes(method) ? newClientSecret() : undefined;
  const clientId = newClientId(who.tenantId);
  return deps.db.tx(async (q) => {
    const { rows } = await q.query<Parameters<typeof clientOf>[0]>(
      `INSERT INTO oauth_clients (tenant_id, client_id, secret_hash, scopes, name, token_endpoint_auth_method, jwks, tls_subject, tls_thumbprint, created_by)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING ${clientColumns}`,
      [
        who.tenantId,
        clientId,
        secret ? hashSecret(secret) : null,
        body.scopes,
        body.name,
        method,
        creds.jwks,
        creds.subject,
        creds.thumbprint,
        { type: 'service', id: who.actor.id },
      ],
    );
    await audit(q, deps, ctx, who, 'oauth_client.create', clientId, { method, scopes: body.scopes });
    return view(clientOf(rows[0] as Parameters<typeof clientOf>[0]), secret);
  });
}

/** Rotate: a new secret (shown once), or new keys / certificate for the key and mTLS methods. */
async function rotate(deps: Deps, ctx: Ctx, id: string, body: Credentials): Promise<Record<string, unknown>> {
  const who = caller(ctx);
  return deps.db.tx(async (q) => {
    const c = await load(q, who.tenantId, id, true);
    if (c.revokedAt) throw new AppError('CONFLICT', 'a revoked client cannot be rotated');
    await refuseForbiddenSecret(q, who.tenantId, c.method);
    const secret = secretMethods.includes(c.method) ? newClientSecret() : undefined;
    const creds = secret
      ? { jwks: null, subject: null, thumbprint: null }
      : await credentialsFor(c.method, body);
    if (secret && Object.keys(body).length > 0)
      throw invalid(`${c.method} rotates its secret and takes no other field`);
    const { rows } = await q.query<Parameters<typeof clientOf>[0]>(
      `UPDATE oauth_clients SET secret_hash = $3, jwks = $4, tls_subject = $5, tls_thumbprint = $6, updated_at = now()
       WHERE tenant_id = $1 AND client_id = $2 RETURNING ${clientColumns}`,
      [who.tenantId, id, secret ? hashSecret(secret) : null, creds.jwks, creds.subject, creds.thumbprint],
    );
    await audit(q, deps, ctx, who, 'oauth_client.rotate', id, { method: c.method });
    return view(clientOf(rows[0] as Parameters<typeof clientOf>[0]), secret);
  });
}

export function oauthClientRoutes(deps: Deps): RouteSpec[] {
  const tags = ['oauth-clients'];
  const noStore = { 'cache-control': 'no-store' };
  return [
    defineRoute({
      ...declared('POST', '/v1/oauth-clients'),
      operationId: 'createOAuthClient',
      tags,
      body: CreateBody,
      summary: 'Register an OAuth client (private_key_jwt, mTLS, or a secret shown once)',
      responses: { 201: { description: 'Registered', schema: ClientView } },
      handler: async (ctx) => ({ status: 201, headers: noStore, body: await create(deps, ctx, ctx.body) }),
    }),
    defineRoute({
      ...declared('GET', '/v1/oauth-clients'),
      operationId: 'listOAuthClients',
      tags,
      summary: "The tenant's OAuth clients, newest first (revoked ones included)",
      responses: { 200: { description: 'Clients', schema: Type.Object({ items: Type.Array(ClientView) }) } },
      handler: async (ctx) => {
        const who = caller(ctx);
        const { rows } = await deps.db.query<Parameters<typeof clientOf>[0]>(
          `SELECT ${clientColumns} FROM oauth_clients WHERE tenant_id = $1 ORDER BY created_at DESC, client_id LIMIT 500`,
          [who.tenantId],
        );
        return { status: 200, body: { items: rows.map((r) => view(clientOf(r))) } };
      },
    }),
    defineRoute({
      ...declared('GET', '/v1/oauth-clients/{id}'),
      operationId: 'getOAuthClient',
      tags,
      params: IdParams,
      summary: 'One OAuth client (never its secret)',
      responses: { 200: { description: 'Client', schema: ClientView } },
      handler: async (ctx) => ({
        status: 200,
        body: view(await load(deps.db, caller(ctx).tenantId, ctx.params.id)),
      }),
    }),
    defineRoute({
      ...declared('POST', '/v1/oauth-clients/{id}/rotate'),
      operationId: 'rotateOAuthClient',
      tags,
      params: IdParams,
      body: RotateBody,
      summary: 'Rotate a client: a new secret (shown once), or new jwks / certificate',
      responses: { 200: { description: 'Rotated', schema: ClientView } },
      handler: async (ctx) => ({
        status: 200,
        headers: noStore,
        body: await rotate(deps, ctx, ctx.params.id, ctx.body),
      }),
    }),
    defineRoute({
      ...declared('DELETE', '/v1/oauth-clients/{id}'),
      operationId: 'revokeOAuthClient',
      tags,
      params: IdParams,
      summary: 'Revoke a client: it obtains no more tokens',
      responses: { 204: { description: 'Revoked' } },
      handler: async (ctx) => {
        const who = caller(ctx);
        await deps.db.tx(async (q) => {
          const c = await load(q, who.tenantId, ctx.params.id, true);
          if (c.revokedAt) return;
          await q.query(
            'UPDATE oauth_clients SET revoked_at = now(), updated_at = now() WHERE tenant_id = $1 AND client_id = $2',
            [who.tenantId, c.clientId],
          );
          await audit(q, deps, ctx, who, 'oauth_client.revoke', c.clientId, {});
        });
        return { status: 204 };
      },
    }),
  ];
}
