/** Reading and decoding request bodies, with a hard size limit. */
import type { IncomingMessage } from 'node:http';
import { AppError } from '../../shared/errors.ts';
import { isJsonMedia, mediaType } from '../../shared/http/media-type.ts';
import { jsonStructureProblem } from '../../shared/json-body.ts';
import type { BodyKind, JsonBodyStructure } from './route.ts';
import { maxNestingDepth, parseQuery } from './validate.ts';

/** SPEC-independent default: a JSON API body never needs more than this. */
export const defaultBodyLimitBytes = 1024 * 1024;

/** Read the whole body, refusing more than `limitBytes` (by header or by count). */
export async function readBody(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? '0');
  if (Number.isFinite(declared) && declared > limitBytes) {
    req.resume();
    throw new AppError('PAYLOAD_TOO_LARGE', `body exceeds ${limitBytes} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > limitBytes) {
      req.resume();
      throw new AppError('PAYLOAD_TOO_LARGE', `body exceeds ${limitBytes} bytes`);
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

/**
 * What every JSON body is held to before it is parsed: no deeper than any route takes (the bound
 * `storable` applies to the parsed value; a parse of 5 MB nested as deep as it goes builds 155 MB).
 */
const anyJsonBody: JsonBodyStructure = { maxDepth: maxNestingDepth, maxCommas: Number.POSITIVE_INFINITY };

/**
 * Decode a body by the route's kind; wrong media type → 415, bad JSON → 400. A JSON body nesting
 * or listing more than `structure` (the route's, else anyJsonBody) is refused 400 before its parse.
 */
export function decodeBody(
  kind: BodyKind,
  contentType: string | undefined,
  raw: Buffer,
  structure: JsonBodyStructure = anyJsonBody,
): unknown {
  if (kind === 'raw') return undefined;
  if (raw.length === 0) return undefined;
  const type = mediaType(contentType);
  if (kind === 'none') {
    // Action routes (`:suspend`, `:activate`, ...) take no body; clients that always send JSON
    // send `{}`, which carries nothing and is accepted as no body (issue 15 item 8).
    if (isJsonMedia(type) && /^\s*\{\s*\}\s*$/.test(raw.toString('latin1'))) return undefined;
    throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'this route takes no request body');
  }
  if (kind === 'form') {
    if (type !== 'application/x-www-form-urlencoded') {
      throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'expected application/x-www-form-urlencoded');
    }
    return parseQuery(utf8Of(raw, 'VALIDATION_FAILED'));
  }
  if (!isJsonMedia(type)) {
    throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'expected application/json');
  }
  const text = utf8Of(raw, 'MALFORMED_JSON');
  const problem = jsonStructureProblem(text, structure.maxDepth, structure.maxCommas);
  if (problem) {
    const message =
      problem === 'depth'
        ? `is nested more than ${structure.maxDepth} levels deep`
        : `holds more than ${structure.maxCommas + 1} members and elements`;
    throw new AppError('VALIDATION_FAILED', `body: ${message}`, {
      extra: { errors: [{ path: 'body', message }] },
    });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new AppError('MALFORMED_JSON', 'request body is not valid JSON');
  }
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The body as text; bytes that are not UTF-8 are refused (400), never read as U+FFFD. */
export function utf8Of(raw: Buffer, code: 'MALFORMED_JSON' | 'VALIDATION_FAILED'): string {
  try {
    return strictUtf8.decode(raw);
  } catch {
    throw new AppError(code, 'request body is not valid UTF-8');
  }
}
