/**
 * POST /oauth2/token (SPEC 5.1, 5.4.6; issue 17 item 2): OAuth 2.0 client credentials (RFC 6749
 * section 4.4). The client authenticates by its registered method (client-auth.ts: a signed
 * client assertion, its TLS certificate, or a shared secret) and receives a short-lived EdDSA
 * JWT (SPEC 8: 5–10 minutes) for audience `core`, bound to its certificate (`cnf.x5t#S256`,
 * RFC 8705 §3) when it connected with one and to its DPoP key (`cnf.jkt`, RFC 9449 §5) when it
 * sent a proof; a tenant with `require_mtls_for_m2m` (SPEC 2.10) has its clients connect with
 * one. Errors are RFC 6749 §5.2 `{error, error_description}` (beside `code`, `message`).
 * Its `iss` is ISSUER_URL when configured (discovery.ts), else the tenant's issuer.
 */
import { randomUUID } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { repeatedKey } from '../../shared/json-body.ts';
import { CoreErrorSchema } from '../http/responses.ts';
import { defineRoute, type RequestContext, type RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { accessTokenType, coreAudience } from './bearer.ts';
import { audit } from '../../shared/audit.ts';
import { certificateThumbprint, tenantMtlsRefusal, type MachineMtlsRule } from '../../shared/mtls.ts';
import { dpopBinding } from '../http/dpop.ts';
import { ClientAuthError, authenticateClient, type Authenticated } from './client-auth.ts';
import { issuerOf, tokenEndpointOf } from './discovery.ts';
import type { OAuthClient } from './clients.ts';
import { declared } from '../http/declared.ts';

/** SPEC 8: access tokens live 5 to 10 minutes. */
export const accessTokenLifetimeS = 600;
const tokenBodyLimitBytes = 4096;

/** RFC 6749 section 5.2 fixes the token endpoint's error members; core's `{code, message}` ride along. */
const OAuthError = Type.Intersect([
  CoreErrorSchema,
  Type.Object({
    error: Type.Union([
      Type.Literal('invalid_request'),
      Type.Literal('invalid_client'),
      Type.Literal('unsupported_grant_type'),
      Type.Literal('invalid_scope'),
      Type.Literal('unauthorized_client'),
    ]),
    error_description: Type.String(),
  }),
]);

/**
 * What the document shows for the token request (issue 15 item 3): RFC 6749 section 4.4 form
 * fields, with the client's credential as its registered method needs (a secret, a signed
 * assertion, or none beside a TLS certificate). The handler reads the body itself (fieldsOf).
 */
const TokenForm = Type.Object({
  grant_type: Type.Literal('client_credentials'),
  client_id: Type.Optional(
    Type.String({
      description:
        'The client id (demo.json `coreClient.clientId`); with client_secret_basic it is in the Authorization header instead',
    }),
  ),
  client_secret: Type.Optional(
    Type.String({
      description:
        'client_secret_post: the secret shown once at registration (demo.json `coreClient.clientSecret`)',
    }),
  ),
  scope: Type.Optional(
    Type.String({
      description: "Space-separated, a subset of the client's scopes (default: all of them)",
      example: 'core:read core:write',
    }),
  ),
  client_assertion_type: Type.Optional(
    Type.Literal('urn:ietf:params:oauth:client-assertion-type:jwt-bearer'),
  ),
  client_assertion: Type.Optional(
    Type.String({
      description: "private_key_jwt (RFC 7523): a JWT signed by the client's key, iss = sub = client id",
    }),
  ),
});

const TokenResponse = Type.Object({
  access_token: Type.String(),
  token_type: Type.Union([Type.Literal('Bearer'), Type.Literal('DPoP')]),
  expires_in: Type.Integer(),
  scope: Type.String(),
});

function oauthError(
  code:
    | 'VALIDATION_FAILED'
    | 'INVALID_CLIENT'
    | 'UNSUPPORTED_GRANT_TYPE'
    | 'INVALID_SCOPE'
    | 'UNAUTHORIZED_CLIENT',
  error: string,
  message: string,
): AppError {
  const headers = code === 'INVALID_CLIENT' ? { 'www-authenticate': 'Basic realm="oauth"' } : undefined;
  return new AppError(code, message, {
    extra: { error, error_description: message },
    ...(headers ? { headers } : {}),
  });
}

/** Token request parameters this endpoint reads (RFC 6749 §4.4, RFC 7523 client assertions). */
const tokenParameters = new Set([
  'grant_type',
  'scope',
  'client_id',
  'client_secret',
  'client_assertion',
  'client_assertion_type',
]);

/**
 * A parameter written the way some form libraries write a list (`scope[]=core:read`,
 * `scope[0]=…`), or a token parameter misspelt only in case or by a stray bracket (`Scope=…`,
 * `scope[=…`). RFC 6749 §3.1 has unrecognised parameters ignored, but ignoring one of these asked
 * for no scope, which grants every scope of the client: the caller meant less and got more.
 * Refused, naming the parameter it was meant as (never the key or value as sent).
 */
function refuseListedParameters(fields: Record<string, string>): Record<string, string> {
  for (const k of Object.keys(fields)) {
    if (tokenParameters.has(k)) continue;
    const base = /^[^[\]]+/.exec(k)?.[0].toLowerCase();
    if (base === undefined || !tokenParameters.has(base)) continue;
    throw oauthError(
      'VALIDATION_FAILED',
      'invalid_request',
      base === k.toLowerCase()
        ? `${base} is spelt in lower case (parameter names are case-sensitive)`
        : `${base} is one string parameter, not a list (scopes are separated by spaces)`,
    );
  }
  return fields;
}

/** Form or JSON body into string fields; anything else is an invalid request. */
function fieldsOf(contentType: string | undefined, raw: Buffer): Record<string, string> {
  return refuseListedParameters(parsedFields(contentType, raw));
}

function parsedFields(contentType: string | undefined, raw: Buffer): Record<string, string> {
  const type = (contentType ?? '').split(';')[0]?.trim().toLowerCase();
  const text = raw.toString('utf8');
  if (type === 'application/x-www-form-urlencoded') {
    // RFC 6749 §3.2: no parameter more than once. Taking one copy would let two readers of one
    // request (a proxy's log, core) see different scopes or clients.
    const params = new URLSearchParams(text);
    // Own keys only: `k in {}` is true for `constructor` or `toString`, which refused a request
    // naming such an extension parameter once (RFC 6749 §3.1: unrecognized ones are ignored).
    const out: Record<string, string> = Object.create(null);
    for (const [k, v] of params) {
      if (Object.hasOwn(out, k))
        throw oauthError('VALIDATION_FAILED', 'invalid_request', `parameter ${k} is repeated`);
      out[k] = v;
    }
    return out;
  }
  if (type === 'application/json') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw oauthError('VALIDATION_FAILED', 'invalid_request', 'body is not valid JSON');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed))
      throw oauthError('VALIDATION_FAILED', 'invalid_request', 'body must be an object');
    // RFC 6749 §3.2, as for a form: JSON.parse keeps the last copy of a repeated key, so one
    // body could name two scopes or clients to two readers. Refused, never resolved.
    const twice = repeatedKey(text);
    if (twice !== undefined)
      throw oauthError('VALIDATION_FAILED', 'invalid_request', `parameter ${twice} is repeated`);
    // Every token request parameter is a string (RFC 6749 appendix A). One that is not was once
    // dropped in silence: `"scope": ["core:read"]` then asked for no scope, which grants all of
    // the client's. Refused, naming it.
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(parsed)) {
      if (typeof v !== 'string')
        throw oauthError('VALIDATION_FAILED', 'invalid_request', `parameter ${k} must be a string`);
      out[k] = v;
    }
    return out;
  }
  throw new AppError(
    'UNSUPPORTED_MEDIA_TYPE',
    'expected application/x-www-form-urlencoded or application/json',
  );
}

function basicCredentials(header: string | undefined): { id: string; secret: string } | undefined {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header?.trim() ?? '');
  if (!m?.[1]) return undefined;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  const i = decoded.indexOf(':');
  if (i < 0) return undefined;
  try {
    return { id: decodeURIComponent(decoded.slice(0, i)), secret: decodeURIComponent(decoded.slice(i + 1)) };
  } catch {
    return undefined; // malformed percent-encoding: no credentials, answered invalid_client
  }
}

type Ctx = RequestContext<unknown, unknown, unknown>;
interface TokenDeps {
  db: Db;
  keys: KeyStore;
  now: () => number;
}

/** The client, or `invalid_client` (same answer whatever failed); the reason goes to the audit only. */
async function clientOf(deps: TokenDeps, ctx: Ctx, f: Record<string, string>): Promise<Authenticated> {
  try {
    const a = await authenticateClient(deps.db, {
      fields: f,
      basic: basicCredentials(ctx.headers.authorization),
      certificate: ctx.identity.fromEdge ? ctx.identity.clientCertificate : undefined,
      audiences: [tokenEndpointOf(deps.keys, ctx), issuerOf(deps.keys, ctx)],
      nowMs: deps.now(),
    });
    // A request naming a tenant is for that tenant's clients only.
    const named = f.tenant_id ?? f.tenantId ?? (ctx.identity.fromEdge ? ctx.identity.tenantId : undefined);
    if (named !== undefined && named !== a.client.tenantId) {
      const other = new ClientAuthError('client belongs to another tenant');
      other.client = a.client;
      throw other;
    }
    return a;
  } catch (err) {
    if (!(err instanceof ClientAuthError)) throw err;
    ctx.log.info({ reason: err.message }, 'client authentication refused');
    // A refused credential of a registered client is a decision about that client: its tenant's
    // audit shows it (a guessed secret, a replayed assertion), as a refused sign-in is recorded.
    // The answer stays the same whatever failed, so the record tells the caller nothing.
    if (err.client) await auditIssue(deps, ctx, err.client, { refused: err.message });
    throw oauthError('INVALID_CLIENT', 'invalid_client', 'client authentication failed');
  }
}

/** `cnf` of the new token: the certificate the client connected with, the DPoP key it proved. */
async function bindingOf(
  deps: TokenDeps,
  ctx: Ctx,
  a: Authenticated,
): Promise<Record<string, string> | undefined> {
  const cnf: Record<string, string> = {};
  const x5t = a.certificate ? certificateThumbprint(a.certificate) : undefined;
  if (x5t) cnf['x5t#S256'] = x5t;
  const pop = await dpopBinding(deps, ctx, {
    tokenEndpoint: true,
    requireNonce: a.policy.requireDpopNonce,
    url: tokenEndpointOf(deps.keys, ctx),
  });
  if (pop) cnf.jkt = pop.jkt;
  return Object.keys(cnf).length > 0 ? cnf : undefined;
}

async function auditIssue(
  deps: TokenDeps,
  ctx: Ctx,
  client: Pick<OAuthClient, 'tenantId' | 'clientId' | 'method'>,
  attrs: { scope: string; bound: string[] } | { refused: string },
): Promise<void> {
  // Its own transaction: the chain head's lock must hold from reading the head to writing the row.
  await audit(deps.db, {
    tenantId: client.tenantId,
    actor: { type: 'oauth_client', id: client.clientId },
    action: 'oauth.token.issue',
    target: { type: 'oauth_client', id: client.clientId },
    decision: { allow: !('refused' in attrs), trace_id: ctx.requestId },
    attrs: { method: client.method, ...attrs },
    ts: new Date(deps.now()),
  });
}

/**
 * What the edge applies to every route naming a tenant (the policy's tenant_active and
 * tenant_ip_ranges) but not here, where the request need not name one: a suspended tenant's
 * client gets no new token, nor one outside the tenant's allowed_ip_ranges (SPEC 2.10). Beside
 * them SPEC 2.10 `require_mtls_for_m2m`: such a tenant's clients get a token only over a
 * connection with a client certificate (the one Envoy verified and the edge forwards, as for
 * tls_client_auth), and bindingOf binds the token to it, so every call it makes needs that
 * certificate too. Answered after authentication only (RFC 6749 §5.2 unauthorized_client), so
 * nobody else learns of it.
 */
function tenantRefusal(a: Authenticated, ctx: Ctx, nowMs: number): string | undefined {
  if (a.policy.suspended) return 'the tenant of this client is suspended';
  if (!a.policy.sourceAllowed(ctx.identity.clientIp))
    return "the source address is outside the tenant's allowed IP ranges";
  return tenantMtlsRefusal(mtlsRuleFor(a), a.certificate, nowMs);
}

/**
 * The tenant's one rule for machine calls (shared/mtls.ts): the front door accepts a certificate
 * any tenant's CA issued (envoy.yaml `machine_mtls`), so a tenant that names the CAs it trusts
 * (`mtls_trusted_cas`) gets its secret and private_key_jwt clients' tokens bound only to
 * certificates from those: otherwise a stolen secret and any certificate some other tenant's CA
 * issued would pass its mutual-TLS requirement. `tls_client_auth` was checked against the same
 * CAs already (client-auth.ts). A self-signed client's certificate is its own registration, from
 * none of them: where the tenant lists CAs, the edge and core refuse each call of its tokens (the
 * rule for every machine call), so it gets no token rather than one it cannot use.
 */
function mtlsRuleFor(a: Authenticated): MachineMtlsRule {
  return a.method === 'tls_client_auth'
    ? { required: a.policy.mtls.required, trustedCas: undefined }
    : a.policy.mtls;
}

async function refuseByTenant(deps: TokenDeps, ctx: Ctx, a: Authenticated): Promise<void> {
  const refused = tenantRefusal(a, ctx, deps.now());
  if (refused === undefined) return;
  await auditIssue(deps, ctx, a.client, { refused });
  throw oauthError('UNAUTHORIZED_CLIENT', 'unauthorized_client', refused);
}

export function oauthRoutes(deps: TokenDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/oauth2/token'),
      operationId: 'issueToken',
      tags: ['oauth'],
      summary:
        'OAuth 2.0 client credentials: issue a core access token (private_key_jwt, mTLS or secret; DPoP and certificate binding)',
      bodyKind: 'raw',
      bodyLimitBytes: tokenBodyLimitBytes,
      rawBody: {
        contentType: 'application/x-www-form-urlencoded',
        schema: JSON.parse(JSON.stringify(TokenForm)) as Record<string, unknown>,
        also: ['application/json'],
      },
      description:
        'Try it out: `client_id` and `client_secret` of `coreClient` in `DATA_DIR/demo.json`, then Authorize `coreClientBearer` with the `access_token`. A client with `tls_client_auth` connects with its certificate (Envoy verifies it); a DPoP proof in the `DPoP` header binds the token (README.md#dpop).',
      responses: {
        200: { description: 'Access token', schema: TokenResponse },
        400: {
          description:
            'invalid_request, unsupported_grant_type, invalid_scope, unauthorized_client (tenant suspended, source outside its allowed IP ranges, no client certificate, or one from a CA it does not list in mtls_trusted_cas, where the tenant sets require_mtls_for_m2m), invalid_dpop_proof or use_dpop_nonce',
          schema: OAuthError,
        },
        401: { description: 'invalid_client', schema: OAuthError },
      },
      handler: async (ctx) => {
        const f = fieldsOf(ctx.headers['content-type'], ctx.rawBody);
        if (f.grant_type !== 'client_credentials') {
          throw oauthError(
            'UNSUPPORTED_GRANT_TYPE',
            'unsupported_grant_type',
            'grant_type must be client_credentials',
          );
        }
        const a = await clientOf(deps, ctx, f);
        await refuseByTenant(deps, ctx, a);
        const { client } = a;
        const requested = f.scope ? f.scope.split(' ').filter(Boolean) : client.scopes;
        if (requested.length === 0 || requested.some((s) => !client.scopes.includes(s))) {
          throw oauthError('INVALID_SCOPE', 'invalid_scope', 'requested scope is not granted to this client');
        }
        const cnf = await bindingOf(deps, ctx, a);
        const scope = requested.join(' ');
        const token = await deps.keys.sign(
          client.tenantId,
          {
            sub: client.clientId,
            aud: coreAudience,
            client_id: client.clientId,
            scope,
            scp: requested,
            jti: randomUUID(),
            ...(cnf ? { cnf } : {}),
          },
          {
            expiresInS: accessTokenLifetimeS,
            typ: accessTokenType,
            ...(deps.keys.issuerUrl ? { issuer: deps.keys.issuerUrl } : {}),
          },
        );
        await auditIssue(deps, ctx, client, { scope, bound: cnf ? Object.keys(cnf) : [] });
        return {
          status: 200,
          headers: {
            'cache-control': 'no-store',
            pragma: 'no-cache',
            ...(cnf?.jkt ? { 'dpop-nonce': deps.keys.dpopNonces.issue(deps.now()) } : {}),
          },
          body: {
            access_token: token,
            token_type: cnf?.jkt ? 'DPoP' : 'Bearer',
            expires_in: accessTokenLifetimeS,
            scope,
          },
        };
      },
    }),
  ];
}
