/**
 * The token in an `Authorization` header: `Bearer <t>` or `DPoP <t>` (RFC 6750, RFC 9449), or,
 * where a caller allows it, the bare JWT form core clients may send (SPEC 5.1).
 * One parser for the edge and every core route that re-checks the caller.
 */
const schemePattern = /^(Bearer|DPoP)\s+(\S+)$/i;
const jwtPattern = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

export function bearerToken(header: string | undefined, opts: { bare?: boolean } = {}): string | undefined {
  const raw = header?.trim();
  if (!raw) return undefined;
  const m = schemePattern.exec(raw);
  if (m) return m[2];
  return opts.bare && jwtPattern.test(raw) ? raw : undefined;
}
