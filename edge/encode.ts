/**
 * The CheckResponse on the wire, written by hand (issue 18 item 1: no per-request allocation that
 * can be avoided). protobufjs, which @grpc/proto-loader serialises with, turns an answer of a
 * dozen headers into an object per field (`fromObject`) and an operation object per value written
 * (`Writer`): in the authorization bench the response's encoding was the largest allocation of a
 * Check, about a fifth of every byte the edge allocated, and with it the scavenges that land in
 * the tail. Here an answer is measured, then written into one buffer.
 *
 * Only the shapes edge/check.ts makes are written (Envoy's external_auth.proto field numbers
 * below); anything else (a field this file does not know) goes to the generic serialiser, so a
 * new field can never be dropped in silence. Proved by test/edge/encode.test.ts: every answer the
 * edge gives decodes, with the generic deserialiser, to what the generic serialiser gives.
 */
import type { CheckResponse, HeaderValueOption } from './types.ts';

// Field numbers (envoy/service/auth/v3/external_auth.proto, config/core/v3/base.proto,
// google/rpc/status.proto, google/protobuf/struct.proto, google/protobuf/wrappers.proto).
const wire = { varint: 0, bytes: 2 } as const;
const key = (field: number, type: number) => (field << 3) | type;

const varintLength = (n: number): number =>
  n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;
/** A length-delimited field of `length` bytes (every field number here is below 16: a one-byte key). */
const framed = (length: number): number => 1 + varintLength(length) + length;
const textLength = (s: string): number => framed(Buffer.byteLength(s));

/** Non-negative 32-bit integers only: every number here is a status or a code. */
const isSmallInt = (n: unknown): n is number =>
  Number.isInteger(n) && (n as number) >= 0 && (n as number) < 2 ** 31;

const isObject = (o: unknown): o is object => typeof o === 'object' && o !== null;
/** An object whose own keys are all among `keys`, none of them holding undefined (protobufjs skips those). */
const known = (o: unknown, keys: readonly string[]) =>
  isObject(o) && Object.entries(o).every(([k, v]) => keys.includes(k) && v !== undefined);

function headerFits(h: HeaderValueOption): boolean {
  return (
    known(h, ['header', 'append']) &&
    known(h.header, ['key', 'value']) &&
    typeof h.header.key === 'string' &&
    typeof h.header.value === 'string' &&
    (h.append === undefined || (known(h.append, ['value']) && typeof h.append.value === 'boolean'))
  );
}

/** Whether `r` holds only what this file writes; otherwise the generic serialiser writes it. */
export function writable(r: CheckResponse): boolean {
  if (!isObject(r) || !known(r, ['status', 'ok_response', 'denied_response', 'dynamic_metadata']))
    return false;
  if (!isObject(r.status) || !known(r.status, ['code', 'message']) || !isSmallInt(r.status.code))
    return false;
  if (r.status.message !== undefined && typeof r.status.message !== 'string') return false;
  if (r.ok_response && r.denied_response) return false;
  const ok = r.ok_response;
  if (
    ok &&
    (!known(ok, ['headers', 'headers_to_remove']) ||
      !Array.isArray(ok.headers) ||
      !Array.isArray(ok.headers_to_remove) ||
      !ok.headers.every(headerFits) ||
      !ok.headers_to_remove.every((h) => typeof h === 'string'))
  )
    return false;
  const denied = r.denied_response;
  if (
    denied &&
    (!known(denied, ['status', 'headers', 'body']) ||
      !known(denied.status, ['code']) ||
      !isSmallInt(denied.status.code) ||
      !Array.isArray(denied.headers) ||
      !denied.headers.every(headerFits) ||
      typeof denied.body !== 'string')
  )
    return false;
  const md = r.dynamic_metadata;
  return (
    md === undefined ||
    (known(md, ['fields']) &&
      isObject(md.fields) &&
      Object.values(md.fields).every((v) => known(v, ['stringValue']) && typeof v.stringValue === 'string'))
  );
}

/** HeaderValue{key, value}: its length. */
const headerValueLength = (h: HeaderValueOption) => textLength(h.header.key) + textLength(h.header.value);
/** HeaderValueOption{header, append}: its length (BoolValue written even when false, as protobufjs writes it). */
const optionLength = (h: HeaderValueOption) => framed(headerValueLength(h)) + (h.append ? framed(2) : 0);
const headersLength = (hs: readonly HeaderValueOption[]) =>
  hs.reduce((n, h) => n + framed(optionLength(h)), 0);
const statusLength = (s: CheckResponse['status']) =>
  1 + varintLength(s.code) + (s.message === undefined ? 0 : textLength(s.message));
const okLength = (ok: NonNullable<CheckResponse['ok_response']>) =>
  headersLength(ok.headers) + ok.headers_to_remove.reduce((n, h) => n + textLength(h), 0);
const deniedLength = (d: NonNullable<CheckResponse['denied_response']>) =>
  framed(1 + varintLength(d.status.code)) + headersLength(d.headers) + textLength(d.body);
/** Struct map entry {key, Value{string_value}}. */
const entryLength = (k: string, v: string) => textLength(k) + framed(textLength(v));
const metadataLength = (md: NonNullable<CheckResponse['dynamic_metadata']>) =>
  Object.entries(md.fields).reduce((n, [k, v]) => n + framed(entryLength(k, v.stringValue)), 0);

class Writer {
  at = 0;
  constructor(readonly buf: Buffer) {}

  varint(n: number): void {
    let v = n;
    while (v >= 0x80) {
      this.buf[this.at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[this.at++] = v;
  }

  /** The key and length of a length-delimited field; its content follows. */
  open(field: number, length: number): void {
    this.buf[this.at++] = key(field, wire.bytes);
    this.varint(length);
  }

  text(field: number, s: string): void {
    this.open(field, Buffer.byteLength(s));
    this.at += this.buf.write(s, this.at, 'utf8');
  }

  number(field: number, n: number): void {
    this.buf[this.at++] = key(field, wire.varint);
    this.varint(n);
  }

  headers(field: number, hs: readonly HeaderValueOption[]): void {
    for (const h of hs) {
      this.open(field, optionLength(h));
      this.open(1, headerValueLength(h));
      this.text(1, h.header.key);
      this.text(2, h.header.value);
      if (h.append) {
        this.open(2, 2);
        this.number(1, h.append.value ? 1 : 0);
      }
    }
  }
}

/** `r` in protobuf wire format; `r` must be `writable`. */
export function encodeCheckResponse(r: CheckResponse): Buffer {
  const status = statusLength(r.status);
  const { ok_response: ok, denied_response: denied, dynamic_metadata: md } = r;
  const total =
    framed(status) +
    (ok ? framed(okLength(ok)) : 0) +
    (denied ? framed(deniedLength(denied)) : 0) +
    (md ? framed(metadataLength(md)) : 0);
  const w = new Writer(Buffer.allocUnsafe(total));
  w.open(1, status);
  w.number(1, r.status.code);
  if (r.status.message !== undefined) w.text(2, r.status.message);
  if (denied) {
    w.open(2, deniedLength(denied));
    w.open(1, 1 + varintLength(denied.status.code));
    w.number(1, denied.status.code);
    w.headers(2, denied.headers);
    w.text(3, denied.body);
  }
  if (ok) {
    w.open(3, okLength(ok));
    w.headers(2, ok.headers);
    for (const h of ok.headers_to_remove) w.text(5, h);
  }
  if (md) {
    w.open(4, metadataLength(md));
    for (const [k, v] of Object.entries(md.fields)) {
      w.open(1, entryLength(k, v.stringValue));
      w.text(1, k);
      w.open(2, textLength(v.stringValue));
      w.text(3, v.stringValue);
    }
  }
  if (w.at !== total) throw new Error(`CheckResponse written as ${w.at} bytes, measured ${total}`);
  return w.buf;
}

/** The Check method's response serialiser: this file's writer, the generic one for anything else. */
export function checkResponseSerializer(generic: (r: CheckResponse) => Buffer): (r: CheckResponse) => Buffer {
  return (r) => (writable(r) ? encodeCheckResponse(r) : generic(r));
}
