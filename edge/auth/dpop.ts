/**
 * Proof of possession at the edge (issue 17 item 2–3): a token bound to a DPoP key (`cnf.jkt`)
 * is accepted only as `Authorization: DPoP <token>` with a proof by that key for this request
 * (shared/dpop.ts, RFC 9449 §7); a token bound to a client certificate (`cnf.x5t#S256`) only
 * on a connection presenting that certificate (RFC 8705 §3). A tenant with `require_dpop`
 * accepts no unbound customer or agent token.
 */
import type { RequestView } from '../check.ts';
import type { EdgeState } from '../state/store.ts';
import { bindingOf } from '../../shared/access-token.ts';
import { DpopError, dpopChallenge, verifyDpopProof } from '../../shared/dpop.ts';
import { certificateThumbprint } from '../../shared/mtls.ts';
import { CredentialError } from './bearer.ts';

function refusal(code: 'invalid_dpop_proof' | 'use_dpop_nonce', message: string): CredentialError {
  return new CredentialError(401, 'invalid_dpop_proof', message, dpopChallenge({ code, message }));
}

/** scheme://host the client addressed, as Envoy (or the dev gateway) describes it. */
export function publicOriginOf(view: RequestView): string {
  const host = view.headers[':authority'] ?? view.headers.host ?? '';
  return `${view.scheme}://${host}`;
}

const requestUrlOf = (view: RequestView): string => `${publicOriginOf(view)}${view.path}`;

/** Refuse the request unless it proves possession of every key the token is bound to. */
export async function checkBinding(
  view: RequestView,
  state: EdgeState,
  token: string,
  cnf: unknown,
  nowMs: number,
  requireDpop = false,
): Promise<void> {
  const { jkt, x5t } = bindingOf(cnf);
  if (x5t !== undefined) {
    const presented = view.peerCertificate ? certificateThumbprint(view.peerCertificate) : undefined;
    if (presented === undefined)
      throw new CredentialError(
        401,
        'invalid_token',
        'this token is bound to a client certificate; none was presented',
      );
    if (presented !== x5t)
      throw new CredentialError(401, 'invalid_token', 'this token is bound to another client certificate');
  }
  if (jkt === undefined) {
    if (requireDpop) throw refusal('invalid_dpop_proof', 'this tenant requires DPoP-bound tokens');
    return;
  }
  if (!/^DPoP\s/i.test(view.headers.authorization ?? ''))
    throw refusal('invalid_dpop_proof', 'a DPoP-bound token is sent as Authorization: DPoP');
  const proof = view.headers.dpop;
  if (!proof) throw refusal('invalid_dpop_proof', 'a DPoP proof is required with this token');
  try {
    await verifyDpopProof({
      proof,
      method: view.method,
      url: requestUrlOf(view),
      nowMs,
      accessToken: token,
      expectedJkt: jkt,
      firstUse: (v, ttl) => state.firstUse('dpop', v, ttl),
    });
  } catch (err) {
    if (err instanceof DpopError) throw refusal(err.code, err.message);
    throw err;
  }
}
