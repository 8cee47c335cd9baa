/**
 * A real OpenID Connect provider for tests (panva's oidc-provider) on 127.0.0.1, port 0, behind a
 * small proxy that is its public issuer URL. The proxy can tamper with the ID token of the next
 * token response (bad signature, a signature that is not base64url or is spelled a second way,
 * wrong audience, wrong nonce, expired), re-signing it with the provider's own key (or a stranger's), or answer it 503 as a
 * provider that is down, so the
 * platform's checks are exercised against real protocol traffic. Sign-in is automatic: the interaction logs in `nextAccount` with its `amr`/`acr`.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, decodeJwt, importJWK, type JWK } from 'jose';
import Provider from 'oidc-provider';
import { callRetrying } from '../helpers/gateway.ts';
import { paddedSignature, spareBitsSignature } from '../helpers/respell.ts';
import type { Res } from '../helpers/http.ts';

export interface TestAccount {
  sub: string;
  preferred_username?: string;
  email?: string;
  groups?: string[];
  amr?: string[];
  acr?: string;
}

export type Tamper =
  | 'none'
  | 'bad_signature'
  | 'garbled_signature'
  | 'padded_signature'
  | 'spare_bits_signature'
  | 'wrong_audience'
  | 'wrong_nonce'
  | 'expired'
  | 'unavailable';

export interface TestIdp {
  issuer: string;
  clientId: string;
  clientSecret: string;
  nextAccount: TestAccount;
  tamper: Tamper;
  /** Follow the browser's part: authorization URL → (auto login) → the redirect back to us; returns its query. */
  authorize(authorizationUrl: string): Promise<Record<string, string>>;
  close(): Promise<void>;
}

const listen = (s: Server): Promise<number> =>
  new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));
const closeServer = (s: Server): Promise<void> => new Promise((resolve) => s.close(() => resolve()));

function rsaJwk(kid: string): JWK {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...(privateKey.export({ format: 'jwk' }) as JWK), kid, alg: 'RS256', use: 'sig' };
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export async function startTestIdp(redirectUri: string): Promise<TestIdp> {
  const key = rsaJwk('idp-key-1');
  const stranger = rsaJwk('idp-key-1');
  const clientId = 'payments-staff';
  const clientSecret = randomBytes(24).toString('base64url');
  const proxy = createServer();
  const proxyPort = await listen(proxy);
  const issuer = `http://127.0.0.1:${proxyPort}`;
  const accounts = new Map<string, TestAccount>();
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [redirectUri],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_post',
      },
    ],
    jwks: { keys: [key] },
    pkce: { required: () => true },
    claims: {
      auth_time: null,
      sid: null,
      openid: ['sub', 'amr', 'acr'],
      profile: ['preferred_username', 'groups'],
      email: ['email', 'email_verified'],
    },
    acrValues: ['mfa', 'pwd'],
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: false } },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    findAccount: (_ctx: unknown, id: string) => {
      const a = accounts.get(id) ?? { sub: id };
      return { accountId: id, claims: () => ({ ...a, email_verified: true }) };
    },
    // Consent is not what is tested: every client gets the scopes it asks for.
    loadExistingGrant: async (ctx: {
      oidc: { client: { clientId: string }; session: { accountId: string }; params: { scope: string } };
    }) => {
      const grant = new provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope);
      grant.addOIDCClaims(['preferred_username', 'groups', 'email', 'email_verified']);
      await grant.save();
      return grant;
    },
  });
  const idp: TestIdp = {
    issuer,
    clientId,
    clientSecret,
    nextAccount: { sub: 'nobody' },
    tamper: 'none',
    authorize: async (authorizationUrl) => {
      const jar = new Map<string, string>();
      let url = authorizationUrl;
      for (let hop = 0; hop < 10; hop++) {
        const res = await fetch(url, {
          redirect: 'manual',
          headers: { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') },
        });
        for (const c of res.headers.getSetCookie()) {
          const [pair] = c.split(';');
          const [k, ...v] = (pair ?? '').split('=');
          if (k) jar.set(k.trim(), v.join('='));
        }
        const location = res.headers.get('location');
        if (!location)
          throw new Error(`the provider stopped at ${url} with ${res.status}: ${await res.text()}`);
        const next = new URL(location, url);
        if (next.href.startsWith(redirectUri)) return Object.fromEntries(next.searchParams);
        url = next.href;
      }
      throw new Error('too many redirects');
    },
    close: async () => {
      await closeServer(proxy);
      await closeServer(inner);
    },
  };
  const inner = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const m = /^\/interaction\/([^/?]+)/.exec(req.url ?? '');
    if (m) {
      const a = idp.nextAccount;
      accounts.set(a.sub, a);
      await provider.interactionFinished(
        req,
        res,
        { login: { accountId: a.sub, ...(a.amr ? { amr: a.amr } : {}), ...(a.acr ? { acr: a.acr } : {}) } },
        { mergeWithLastSubmission: false },
      );
      return;
    }
    provider.callback()(req, res);
  });
  const innerPort = await listen(inner);
  proxy.on('request', (req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const body = await readBody(req);
      if (req.url?.startsWith('/token') && idp.tamper === 'unavailable') {
        // The provider down behind its load balancer: the next token request is not answered.
        idp.tamper = 'none';
        res.writeHead(503, { 'content-type': 'text/html' });
        res.end('<html><body>503 Service Unavailable</body></html>');
        return;
      }
      const up = httpRequest(
        { host: '127.0.0.1', port: innerPort, method: req.method, path: req.url, headers: req.headers },
        async (upRes) => {
          const data = await readBody(upRes);
          const headers = { ...upRes.headers };
          let out = data;
          if (req.url?.startsWith('/token') && upRes.statusCode === 200 && idp.tamper !== 'none') {
            const json = JSON.parse(data.toString('utf8')) as { id_token: string };
            json.id_token = await tampered(json.id_token, idp.tamper, key, stranger);
            idp.tamper = 'none';
            out = Buffer.from(JSON.stringify(json));
            delete headers['content-length'];
            delete headers.etag;
          }
          res.writeHead(upRes.statusCode ?? 502, headers);
          res.end(out);
        },
      );
      up.end(body);
    })();
  });
  return idp;
}

async function tampered(idToken: string, how: Tamper, key: JWK, stranger: JWK): Promise<string> {
  // A signature that is not base64url at all (a character outside the alphabet).
  if (how === 'garbled_signature') return `${idToken.slice(0, idToken.lastIndexOf('.'))}.not*base64url`;
  // The provider's own token spelled a second way (shared/jws.ts): lenient decoders read the same bytes.
  if (how === 'padded_signature') return paddedSignature(idToken);
  if (how === 'spare_bits_signature') return spareBitsSignature(idToken);
  const claims = decodeJwt(idToken);
  const nowS = Math.floor(Date.now() / 1000);
  if (how === 'wrong_audience') claims.aud = 'another-client';
  if (how === 'wrong_nonce') claims.nonce = 'not-the-nonce';
  if (how === 'expired') Object.assign(claims, { iat: nowS - 7200, exp: nowS - 3600 });
  const signer = await importJWK(how === 'bad_signature' ? stranger : key, 'RS256');
  return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'idp-key-1' }).sign(signer);
}

/** A federated staff sign-in of `account` through the gateway at `gw`: the callback's answer. */
export async function federatedSignIn(gw: string, provider: TestIdp, account: TestAccount): Promise<Res> {
  provider.nextAccount = account;
  const begin = await callRetrying(gw, 'POST', '/auth/login', {
    json: { tenantId: 'demo', method: 'federation' },
  });
  if (begin.status !== 200) return begin;
  const query = await provider.authorize(begin.json.authorizationUrl as string);
  return callRetrying(gw, 'GET', `/auth/callback?${new URLSearchParams(query)}`);
}

/** The body of `PUT /v1/identity-provider` naming `provider`, its redirect back to the gateway `gw`. */
export const providerSettings = (provider: TestIdp, gw: string) => ({
  issuer: provider.issuer,
  clientId: provider.clientId,
  clientSecret: provider.clientSecret,
  redirectUri: `${gw}/auth/callback`,
});
