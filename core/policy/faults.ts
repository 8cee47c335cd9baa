/**
 * Who a failure of policy tooling is the fault of (candidate upload, simulate's `policy_ref`,
 * impact replay): the submitted bundle's (a BundleError: policy/runtime/bundle.ts) is answered
 * 422 BUNDLE_INVALID naming the check that failed; ours never is. The WASM runtime failing to
 * start, an I/O error, a source or worker that did not answer: logged, and 503 POLICY_UNAVAILABLE
 * with Retry-After. A defect of our code (a TypeError, a ReferenceError) goes up as it is: the
 * HTTP layer logs it whole and answers 500 INTERNAL, without its message or stack.
 */
import type { Logger } from 'pino';
import { BundleError } from '../../policy/runtime/bundle.ts';
import { AppError } from '../../shared/errors.ts';

/** How long a caller is asked to wait after a failure of ours. */
export const policyRetryAfterS = 5;

const isDefect = (err: unknown): boolean =>
  err instanceof TypeError || err instanceof ReferenceError || err instanceof SyntaxError;

/** What to throw for `err`, met while `what` loaded or ran a bundle (see above). */
export function policyToolingError(err: unknown, log: Logger, what: string): unknown {
  if (err instanceof AppError || isDefect(err)) return err;
  if (err instanceof BundleError) return new AppError('BUNDLE_INVALID', err.message);
  log.error({ err }, `${what} failed for a reason of this service, not of the bundle`);
  return new AppError('POLICY_UNAVAILABLE', `${what} is not possible right now; retry shortly`, {
    headers: { 'retry-after': String(policyRetryAfterS) },
  });
}
