/**
 * Errors of an audit batch that retrying cannot cure: the batch itself is bad (a value canonical
 * JSON refuses, data PostgreSQL refuses: SQLSTATE class 22). Anything else (connection lost,
 * database down, thread gone) is transient: the batch stays queued and is retried.
 */
export function isPoison(err: unknown): boolean {
  if (err instanceof TypeError || err instanceof RangeError) return true;
  if ((err as { poison?: unknown }).poison === true) return true;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && code.startsWith('22');
}

/** An error reported by the audit thread, with what classifies it. */
export class AuditWriteError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
    readonly poison: boolean,
  ) {
    super(message);
  }
}
