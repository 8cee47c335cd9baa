/** How a Content-Type is read: one reading for core's body decoder and the edge's body checks. */

/** The media type of a Content-Type header, parameters dropped, lower-cased. */
export function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
}

/** `application/json` or any `application/*+json`. */
export function isJsonMedia(type: string): boolean {
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

/** Whether core decodes a body of this Content-Type as JSON (the edge reads bodies the same way). */
export function isJsonContentType(contentType: string | undefined): boolean {
  return isJsonMedia(mediaType(contentType));
}
