/**
 * One reading of a request path for the edge and core. The edge decides on the raw path; a
 * URL parser would turn `\` into `/`, resolve `.`/`..` (also `%2e`) and drop `#…`, so a raw path
 * such as `/v1/docs/x\..\..\..\v1\accounts` could be judged as one route and served as another.
 * Only paths that a URL parser leaves exactly as they are, with no empty segment, are accepted;
 * everything else is refused before routing, on both sides.
 */
export function isCanonicalPath(path: string): boolean {
  if (!path.startsWith('/') || path.includes('//')) return false;
  let parsed: string;
  try {
    parsed = new URL(path, 'http://canonical.invalid').pathname;
  } catch {
    return false;
  }
  return parsed === path;
}
