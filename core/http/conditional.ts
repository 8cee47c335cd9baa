/**
 * If-None-Match (RFC 9110 13.1.2), for every GET that answers 304: the header is `*` or a list of
 * entity tags, compared weakly (`W/"x"` and `"x"` name the same representation for this
 * purpose), so a client or cache that sends several tags, or one it got weak from an
 * intermediary, still gets its 304 (SPEC 9.5; SCIM RFC 7644 3.14).
 */
const opaque = (tag: string) => (tag.startsWith('W/') ? tag.slice(2) : tag);

/** True when `header` names the current representation's `etag` (answer 304). */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const tags = header.split(',').map((t) => t.trim());
  if (tags.includes('*')) return true;
  const current = opaque(etag);
  return tags.some((t) => t !== '' && opaque(t) === current);
}
