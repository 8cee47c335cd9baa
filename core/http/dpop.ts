/**
 * DPoP proofs where core issues tokens (issue 17 item 3; RFC 9449 §5): sign-in, step-up
 * completion, refresh (customers, agents, staff) and `/oauth2/token`. The proof is checked by
 * the implementation the edge uses (shared/dpop.ts) against the URL the client addressed (the
 * edge's `x-public-origin`); its `jti` is single use across every instance (`edge_replay`).
 *
 * `dpopBinding` answers `{jkt}` (bind the new tokens: `cnf.jkt`, `token_type: DPoP`),
 * `undefined` (no proof: a bearer token, unless the caller requires one) or throws the
 * refusal: 401 with `WWW-Authenticate: DPoP ...` and a fresh `DPoP-Nonce` (RFC 9449 §7.1, §8).
 */
import { AppError } from '../../shared/errors.ts';
import { DpopError, dpopChallenge, verifyDpopProof } from '../../shared/dpop.ts';
import { firstUse } from '../../shared/replay.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import type { KeyStore } from '../keys/keys.ts';
import type { RequestContext } from './route.ts';

export interface DpopDeps {
  db: Queryable;
  keys: KeyStore;
  now: () => number;
}

export interface BindingOptions {
  /** The URL the proof must name; by default the request's own (requestUrlOf). */
  url?: string;
  /** A session already bound (refresh): the proof must be by this key, and is then required. */
  expectedJkt?: string;
  /** The tenant asks for server nonces (security setting `require_dpop_nonce`). */
  requireNonce?: boolean;
  /** RFC 9449 §5.1: at the token endpoint refusals are 400 `{error, error_description}`. */
  tokenEndpoint?: boolean;
}

type Ctx = Pick<RequestContext<unknown, unknown, unknown>, 'headers' | 'path' | 'identity' | 'method'>;

/** The URL the client addressed: the edge's view of scheme and host, and this path. */
export function requestUrlOf(ctx: Ctx): string {
  const origin =
    ctx.identity.fromEdge && ctx.identity.publicOrigin
      ? ctx.identity.publicOrigin
      : `http://${ctx.headers.host ?? 'localhost'}`;
  return `${origin}${ctx.path}`;
}

/** A DPoP refusal with its challenge and a nonce the client may use for its next proof. */
export function dpopRefusal(
  deps: DpopDeps,
  code: 'invalid_dpop_proof' | 'use_dpop_nonce',
  message: string,
  tokenEndpoint = false,
): AppError {
  const headers = {
    'www-authenticate': dpopChallenge({ code, message }),
    'dpop-nonce': deps.keys.dpopNonces.issue(deps.now()),
    'cache-control': 'no-store',
  };
  if (tokenEndpoint) {
    return new AppError(code === 'use_dpop_nonce' ? 'OAUTH_DPOP_NONCE' : 'OAUTH_DPOP_INVALID', message, {
      headers,
      extra: { error: code, error_description: message },
    });
  }
  return new AppError(code === 'use_dpop_nonce' ? 'DPOP_NONCE_REQUIRED' : 'DPOP_PROOF_INVALID', message, {
    headers,
    extra: { error: code },
  });
}

/** Check the request's DPoP proof, if any; see the module comment for the three outcomes. */
export async function dpopBinding(
  deps: DpopDeps,
  ctx: Ctx,
  opts: BindingOptions = {},
): Promise<{ jkt: string } | undefined> {
  const proof = ctx.headers.dpop;
  if (proof === undefined) {
    if (opts.expectedJkt !== undefined)
      throw dpopRefusal(
        deps,
        'invalid_dpop_proof',
        'this session is bound to a DPoP key: send a proof by it',
        opts.tokenEndpoint,
      );
    return undefined;
  }
  const nowMs = deps.now();
  try {
    return await verifyDpopProof({
      proof,
      method: ctx.method,
      url: opts.url ?? requestUrlOf(ctx),
      nowMs,
      ...(opts.expectedJkt !== undefined ? { expectedJkt: opts.expectedJkt } : {}),
      ...(opts.requireNonce ? { nonce: (v: string) => deps.keys.dpopNonces.valid(v, nowMs) } : {}),
      firstUse: (v, ttl) => firstUse(deps.db, 'dpop', v, ttl),
    });
  } catch (err) {
    if (err instanceof DpopError) throw dpopRefusal(deps, err.code, err.message, opts.tokenEndpoint);
    throw err;
  }
}

/**
 * RFC 9449 §7.1: a DPoP-bound access token (`cnf.jkt`) that core verifies itself (the staff
 * routes the edge passes as public) counts only as `Authorization: DPoP` with a proof by its key
 * for this request naming the token (`ath`), as the edge demands on the routes it checks.
 */
export async function requireTokenProof(deps: DpopDeps, ctx: Ctx, token: string, jkt: string): Promise<void> {
  if (!/^DPoP\s/i.test(ctx.headers.authorization ?? ''))
    throw tokenProofRefusal(deps, 'a DPoP-bound token is sent as Authorization: DPoP');
  const proof = ctx.headers.dpop;
  if (proof === undefined) throw tokenProofRefusal(deps, 'a DPoP proof is required with this token');
  const nowMs = deps.now();
  try {
    await verifyDpopProof({
      proof,
      method: ctx.method,
      url: requestUrlOf(ctx),
      nowMs,
      accessToken: token,
      expectedJkt: jkt,
      firstUse: (v, ttl) => firstUse(deps.db, 'dpop', v, ttl),
    });
  } catch (err) {
    if (err instanceof DpopError) throw tokenProofRefusal(deps, err.message);
    throw err;
  }
}

/** An unbound access token in a tenant whose settings require DPoP (`require_dpop`, as the edge refuses it). */
export function refuseUnboundToken(deps: DpopDeps): AppError {
  return tokenProofRefusal(deps, 'this tenant requires DPoP-bound tokens');
}

/**
 * An access token used without the proof its binding demands: 401 `invalid_dpop_proof`, the code
 * the edge answers for the same refusal (edge/auth/dpop.ts; issue 21 item 2, one code per
 * refusal), with the challenge and a fresh nonce. Sign-in proofs keep DPOP_PROOF_INVALID.
 */
function tokenProofRefusal(deps: DpopDeps, message: string): AppError {
  return new AppError('invalid_dpop_proof', message, {
    headers: {
      'www-authenticate': dpopChallenge({ code: 'invalid_dpop_proof', message }),
      'dpop-nonce': deps.keys.dpopNonces.issue(deps.now()),
      'cache-control': 'no-store',
    },
  });
}

/**
 * The one rule for every sign-in, step-up and refresh (issue 17 item 3; customers, agents, staff):
 * a proof binds what is issued, the tenant's `require_dpop_nonce` asks for server nonces, and its
 * `require_dpop` refuses to go on without a proof. `settings` undefined (no such tenant): no rule.
 */
export async function signInBinding(
  deps: DpopDeps,
  ctx: Ctx,
  settings: { requireDpop: boolean; requireDpopNonce: boolean } | undefined,
): Promise<{ jkt: string } | undefined> {
  const pop = await dpopBinding(deps, ctx, { requireNonce: settings?.requireDpopNonce ?? false });
  return settings?.requireDpop ? requireProof(pop, deps) : pop;
}

/** Refused unless a proof was given: a tenant with `require_dpop` signs in only with one. */
export function requireProof(binding: { jkt: string } | undefined, deps: DpopDeps): { jkt: string } {
  if (binding) return binding;
  const message = 'this tenant requires a DPoP proof at sign-in (RFC 9449)';
  throw new AppError('DPOP_REQUIRED', message, {
    headers: {
      'www-authenticate': dpopChallenge({ code: 'invalid_dpop_proof', message }),
      'dpop-nonce': deps.keys.dpopNonces.issue(deps.now()),
    },
    extra: { error: 'invalid_dpop_proof' },
  });
}

/**
 * Issue 17 item 3 (RFC 9449 §5): a bound session's refresh token is usable only with a proof by
 * its key; an unbound one is bound by the first proof sent with it. The proof's signature, URL,
 * time and jti are checked before the token is looked at.
 */
export function sessionKey(
  sessionJkt: string | null,
  pop: { jkt: string } | undefined,
): { ok: boolean; jkt: string | undefined } {
  if (sessionJkt === null) return { ok: true, jkt: pop?.jkt };
  return { ok: pop?.jkt === sessionJkt, jkt: sessionJkt };
}
