/**
 * A strict multipart/form-data reader (RFC 7578) over a body already read with a hard limit.
 * Small on purpose: one pass over the buffer, no temp files, every malformation is
 * MULTIPART_INVALID (400); a wrong media type is 415. Part and header sizes are bounded.
 */
import { AppError } from '../../shared/errors.ts';

export interface Part {
  name: string;
  filename: string | undefined;
  contentType: string | undefined;
  data: Buffer;
}

/** Bounds on what one upload request may contain. */
export const maxParts = 8;
export const maxPartHeaderBytes = 4096;

const crlf = Buffer.from('\r\n');
const headerEnd = Buffer.from('\r\n\r\n');

function bad(message: string): AppError {
  return new AppError('MULTIPART_INVALID', message);
}

/** The boundary of a multipart/form-data Content-Type, or 415. */
export function boundaryOf(contentType: string | undefined): string {
  const [type, ...params] = (contentType ?? '').split(';');
  if (type?.trim().toLowerCase() !== 'multipart/form-data')
    throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'expected multipart/form-data');
  for (const p of params) {
    const m = /^\s*boundary\s*=\s*(?:"([^"]{1,70})"|([^\s";]{1,70}))\s*$/i.exec(p);
    const b = m?.[1] ?? m?.[2];
    if (b) return b;
  }
  throw bad('multipart/form-data needs a boundary parameter of 1 to 70 characters');
}

function dispositionOf(value: string): { name: string; filename: string | undefined } {
  const [kind, ...params] = value.split(';');
  if (kind?.trim().toLowerCase() !== 'form-data') throw bad('each part needs Content-Disposition: form-data');
  let name: string | undefined;
  let filename: string | undefined;
  for (const p of params) {
    const m = /^\s*([A-Za-z*]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))\s*$/.exec(p);
    if (!m) continue;
    const v = (m[2] ?? m[3] ?? '').replace(/\\(.)/g, '$1');
    if (m[1]?.toLowerCase() === 'name') name = v;
    if (m[1]?.toLowerCase() === 'filename') filename = v;
  }
  if (name === undefined) throw bad('a part has no name');
  return { name, filename };
}

function headersOf(raw: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of raw.split('\r\n')) {
    const i = line.indexOf(':');
    if (i <= 0) throw bad('malformed part header');
    out[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return out;
}

/** Split a multipart body into its parts. */
export function parseMultipart(body: Buffer, boundary: string): Part[] {
  const delimiter = Buffer.from(`--${boundary}`);
  const inner = Buffer.from(`\r\n--${boundary}`);
  // The first delimiter opens the body (a preamble before it is allowed and ignored).
  let pos = body.subarray(0, delimiter.length).equals(delimiter) ? 0 : body.indexOf(inner);
  if (pos < 0) throw bad('no multipart boundary found');
  if (pos > 0) pos += 2;
  const parts: Part[] = [];
  for (;;) {
    pos += delimiter.length;
    if (body.subarray(pos, pos + 2).toString('latin1') === '--') return parts;
    if (!body.subarray(pos, pos + 2).equals(crlf)) throw bad('malformed boundary line');
    pos += 2;
    const end = body.indexOf(headerEnd, pos);
    if (end < 0 || end - pos > maxPartHeaderBytes) throw bad('part headers are missing or too long');
    const headers = headersOf(body.subarray(pos, end).toString('utf8'));
    const next = body.indexOf(inner, end + 4);
    if (next < 0) throw bad('the body ends before the closing boundary');
    if (parts.length === maxParts) throw bad(`at most ${maxParts} parts`);
    const d = dispositionOf(headers['content-disposition'] ?? '');
    parts.push({ ...d, contentType: headers['content-type'], data: body.subarray(end + 4, next) });
    pos = next + 2;
  }
}

/** Media types accepted as dispute evidence, recognised by their first bytes (never by name or header). */
const signatures: { type: 'image/png' | 'image/jpeg' | 'application/pdf'; magic: Buffer }[] = [
  { type: 'image/png', magic: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]) },
  { type: 'image/jpeg', magic: Buffer.from([0xff, 0xd8, 0xff]) },
  { type: 'application/pdf', magic: Buffer.from('%PDF-', 'latin1') },
];

export function sniff(data: Buffer): 'image/png' | 'image/jpeg' | 'application/pdf' | undefined {
  return signatures.find((s) => data.subarray(0, s.magic.length).equals(s.magic))?.type;
}
