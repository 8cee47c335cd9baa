/**
 * POST /oauth2/token (SPEC 5.1): OAuth 2.0 client credentials (RFC 6749 section 4.4). The
 * client authenticates with HTTP Basic or client_id/client_secret in a form or JSON body and
 * receives a short-lived EdDSA JWT (SPEC 8: 5–10 minutes) for audience `core`.
 */
import { randomUUID } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { Db } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { CoreErrorSchema } from '../http/responses.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { accessTokenType, coreAudience } from './bearer.ts';
import { findClient, secretMatches } from './clients.ts';

/** SPEC 8: access tokens live 5 to 10 minutes. */
export const accessTokenLifetimeS = 600;
const tokenBodyLimitBytes = 4096;

/** RFC 6749 section 5.2 fixes the token endpoint's error members; core's `{code, message}` ride along. */
const OAuthError = Type.Intersect([
  CoreErrorSchema,
  Type.Object({ error: Type.Union([Type.Literal('invalid_request'), Type.Literal('invalid_client'), Type.Literal('unsupported_grant_type'), Type.Literal('invalid_scope')]), error_description: Type.String() }),
]);

const TokenResponse = Type.Object({
  access_token: Type.String(),
  token_type: Type.Literal('Bearer'),
  expires_in: Type.Integer(),
  scope: Type.String(),
});

function oauthError(code: 'VALIDATION_FAILED' | 'INVALID_CLIENT' | 'UNSUPPORTED_GRANT_TYPE' | 'INVALID_SCOPE', error: string, message: string): AppError {
  const headers = code === 'INVALID_CLIENT' ? { 'www-authenticate': 'Basic realm="oauth"' } : undefined;
  return new AppError(code, message, { extra: { error, error_description: message }, ...(headers ? { headers } : {}) });
}

/** Form or JSON body into string fields; anything else is an invalid request. */
function fieldsOf(contentType: string | undefined, raw: Buffer): Record<string, string> {
  const type = (contentType ?? '').split(';')[0]?.trim().toLowerCase();
  const text = raw.toString('utf8');
  if (type === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(text));
  if (type === 'application/json') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw oauthError('VALIDATION_FAILED', 'invalid_request', 'body is not valid JSON');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw oauthError('VALIDATION_FAILED', 'invalid_request', 'body must be an object');
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(parsed)) if (typeof v === 'string') out[k] = v;
    return out;
  }
  throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'expected application/x-www-form-urlencoded or application/json');
}

function basicCredentials(header: string | undefined): { id: string; secret: string } | undefined {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header?.trim() ?? '');
  if (!m?.[1]) return undefined;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  const i = decoded.indexOf(':');
  if (i < 0) return undefined;
  return { id: decodeURIComponent(decoded.slice(0, i)), secret: decodeURIComponent(decoded.slice(i + 1)) };
}

export function oauthRoutes(deps: { db: Db; keys: KeyStore }): RouteSpec[] {
  return [
    defineRoute({
      method: 'POST', path: '/oauth2/token', operationId: 'issueToken', tags: ['oauth'],
      summary: 'OAuth 2.0 client credentials: issue a core access token',
      bodyKind: 'raw', bodyLimitBytes: tokenBodyLimitBytes,
      responses: {
        200: { description: 'Access token', schema: TokenResponse },
        400: { description: 'invalid_request, unsupported_grant_type or invalid_scope', schema: OAuthError },
        401: { description: 'invalid_client', schema: OAuthError },
      },
      handler: async ({ headers, rawBody }) => {
        const f = fieldsOf(headers['content-type'], rawBody);
        if (f.grant_type !== 'client_credentials') {
          throw oauthError('UNSUPPORTED_GRANT_TYPE', 'unsupported_grant_type', 'grant_type must be client_credentials');
        }
        const basic = basicCredentials(headers.authorization);
        const id = basic?.id ?? f.client_id;
        const secret = basic?.secret ?? f.client_secret;
        if (!id || !secret) throw oauthError('INVALID_CLIENT', 'invalid_client', 'client authentication failed');
        const client = await findClient(deps.db, id);
        // Unknown client and wrong secret answer the same (no client enumeration).
        if (!client || !secretMatches(client, secret)) throw oauthError('INVALID_CLIENT', 'invalid_client', 'client authentication failed');
        const requested = f.scope ? f.scope.split(' ').filter(Boolean) : client.scopes;
        if (requested.length === 0 || requested.some((s) => !client.scopes.includes(s))) {
          throw oauthError('INVALID_SCOPE', 'invalid_scope', 'requested scope is not granted to this client');
        }
        const scope = requested.join(' ');
        const token = await deps.keys.sign(
          client.tenantId,
          { sub: client.clientId, aud: coreAudience, client_id: client.clientId, scope, scp: requested, jti: randomUUID() },
          { expiresInS: accessTokenLifetimeS, typ: accessTokenType },
        );
        return {
          status: 200,
          headers: { 'cache-control': 'no-store', pragma: 'no-cache' },
          body: { access_token: token, token_type: 'Bearer', expires_in: accessTokenLifetimeS, scope },
        };
      },
    }),
  ];
}
