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
function known(o: unknown, keys: readonly string[]): boolean {
  if (!isObject(o)) return false;
  // A loop over the keys, not Object.entries: no array per object checked on every Check.
  for (const k in o) {
    if (!Object.hasOwn(o, k)) continue;
    if (!keys.includes(k) || (o as Record<string, unknown>)[k] === undefined) return false;
  }
  return true;
}
/**
 * None of the message's other fields set. protobufjs reads each field by name (`object.field != null`),
 * through the prototype and non-enumerable properties too, where `known` sees only own enumerable keys:
 * a field held there would be written by the generic serialiser and dropped here.
 */
function unset(o: object, fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i++) {
    const v = (o as Record<string, unknown>)[fields[i] as string];
    if (v !== undefined && v !== null) return false;
  }
  return true;
}
/**
 * Every element of `a` by index, as protobufjs reads an array: a hole is an element `fits` refuses
 * (`every` would skip it), and an overridden iterator is never consulted.
 */
function each<T>(a: readonly T[], fits: (x: T) => boolean): boolean {
  for (let i = 0; i < a.length; i++) if (!fits(a[i] as T)) return false;
  return true;
}
/** Absent, or an object: protobufjs refuses any other value of a message field. */
const absentOrObject = (o: unknown) => o === undefined || o === null || isObject(o);

// The fields of each message this file does not write (the .proto files named above).
const otherFields = {
  status: ['details'],
  ok: [
    'dynamic_metadata',
    'response_headers_to_add',
    'query_parameters_to_set',
    'query_parameters_to_remove',
  ],
  option: ['append_action', 'keep_empty_value'],
  header: ['raw_value'],
  value: ['nullValue', 'numberValue', 'boolValue', 'structValue', 'listValue'],
} as const;

function headerFits(h: HeaderValueOption): boolean {
  return (
    known(h, ['header', 'append']) &&
    unset(h, otherFields.option) &&
    known(h.header, ['key', 'value']) &&
    unset(h.header, otherFields.header) &&
    typeof h.header.key === 'string' &&
    typeof h.header.value === 'string' &&
    (h.append === undefined || (known(h.append, ['value']) && typeof h.append.value === 'boolean'))
  );
}

const stringFits = (s: unknown) => typeof s === 'string';

function statusFits(s: CheckResponse['status']): boolean {
  return (
    known(s, ['code', 'message']) &&
    unset(s, otherFields.status) &&
    isSmallInt(s.code) &&
    (s.message === undefined || typeof s.message === 'string')
  );
}

function okFits(ok: CheckResponse['ok_response']): boolean {
  return (
    ok === undefined ||
    ok === null ||
    (known(ok, ['headers', 'headers_to_remove']) &&
      unset(ok, otherFields.ok) &&
      Array.isArray(ok.headers) &&
      Array.isArray(ok.headers_to_remove) &&
      each(ok.headers, headerFits) &&
      each(ok.headers_to_remove, stringFits))
  );
}

function deniedFits(denied: CheckResponse['denied_response']): boolean {
  return (
    denied === undefined ||
    denied === null ||
    (known(denied, ['status', 'headers', 'body']) &&
      known(denied.status, ['code']) &&
      isSmallInt(denied.status.code) &&
      Array.isArray(denied.headers) &&
      each(denied.headers, headerFits) &&
      typeof denied.body === 'string')
  );
}

function metadataFits(md: CheckResponse['dynamic_metadata']): boolean {
  return (
    md === undefined ||
    (known(md, ['fields']) &&
      isObject(md.fields) &&
      Object.values(md.fields).every(
        (v) => known(v, ['stringValue']) && unset(v, otherFields.value) && typeof v.stringValue === 'string',
      ))
  );
}

/** Whether `r` holds only what this file writes; otherwise the generic serialiser writes it. */
export function writable(r: CheckResponse): boolean {
  return (
    isObject(r) &&
    // @grpc/proto-loader refuses an array as a message (the only array check it makes).
    !Array.isArray(r) &&
    known(r, ['status', 'ok_response', 'denied_response', 'dynamic_metadata']) &&
    isObject(r.status) &&
    statusFits(r.status) &&
    absentOrObject(r.ok_response) &&
    absentOrObject(r.denied_response) &&
    !(r.ok_response && r.denied_response) &&
    okFits(r.ok_response) &&
    deniedFits(r.denied_response) &&
    metadataFits(r.dynamic_metadata)
  );
}

/** HeaderValue{key, value}: its length. */
const headerValueLength = (h: HeaderValueOption) => textLength(h.header.key) + textLength(h.header.value);
/** HeaderValueOption{header, append}: its length (BoolValue written even when false, as protobufjs writes it). */
const optionLength = (h: HeaderValueOption) => framed(headerValueLength(h)) + (h.append ? framed(2) : 0);
function headersLength(hs: readonly HeaderValueOption[]): number {
  let n = 0;
  for (let i = 0; i < hs.length; i++) n += framed(optionLength(hs[i] as HeaderValueOption));
  return n;
}
function textsLength(ss: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < ss.length; i++) n += textLength(ss[i] as string);
  return n;
}
const statusLength = (s: CheckResponse['status']) =>
  1 + varintLength(s.code) + (s.message === undefined ? 0 : textLength(s.message));
const okLength = (ok: NonNullable<CheckResponse['ok_response']>) =>
  headersLength(ok.headers) + textsLength(ok.headers_to_remove);
const deniedLength = (d: NonNullable<CheckResponse['denied_response']>) =>
  framed(1 + varintLength(d.status.code)) + headersLength(d.headers) + textLength(d.body);
/** Struct map entry {key, Value{string_value}}. */
const entryLength = (k: string, v: string) => textLength(k) + framed(textLength(v));
const metadataLength = (md: NonNullable<CheckResponse['dynamic_metadata']>) =>
  Object.entries(md.fields).reduce((n, [k, v]) => n + framed(entryLength(k, v.stringValue)), 0);

/**
 * Lengths are measured before the content is written, each value read again to write it: every
 * message is checked to end where its length said (`close`), so a value that reads differently the
 * second time (a getter) can never leave framing Envoy would misparse; the writer throws instead.
 */
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

  /** The key and length of a length-delimited field; returns where its content must end. */
  open(field: number, length: number): number {
    this.buf[this.at++] = key(field, wire.bytes);
    this.varint(length);
    return this.at + length;
  }

  close(end: number): void {
    if (this.at !== end)
      throw new Error(`CheckResponse field written to ${this.at}, measured to end at ${end}`);
  }

  text(field: number, s: string): void {
    const end = this.open(field, Buffer.byteLength(s));
    this.at += this.buf.write(s, this.at, 'utf8');
    this.close(end);
  }

  number(field: number, n: number): void {
    this.buf[this.at++] = key(field, wire.varint);
    this.varint(n);
  }

  headers(field: number, hs: readonly HeaderValueOption[]): void {
    for (let i = 0; i < hs.length; i++) {
      const h = hs[i] as HeaderValueOption;
      const option = this.open(field, optionLength(h));
      const header = this.open(1, headerValueLength(h));
      this.text(1, h.header.key);
      this.text(2, h.header.value);
      this.close(header);
      if (h.append) {
        const append = this.open(2, 2);
        this.number(1, h.append.value ? 1 : 0);
        this.close(append);
      }
      this.close(option);
    }
  }
}

function writeDenied(w: Writer, denied: NonNullable<CheckResponse['denied_response']>): void {
  const end = w.open(2, deniedLength(denied));
  const status = w.open(1, 1 + varintLength(denied.status.code));
  w.number(1, denied.status.code);
  w.close(status);
  w.headers(2, denied.headers);
  w.text(3, denied.body);
  w.close(end);
}

function writeOk(w: Writer, ok: NonNullable<CheckResponse['ok_response']>): void {
  const end = w.open(3, okLength(ok));
  w.headers(2, ok.headers);
  for (let i = 0; i < ok.headers_to_remove.length; i++) w.text(5, ok.headers_to_remove[i] as string);
  w.close(end);
}

function writeMetadata(w: Writer, md: NonNullable<CheckResponse['dynamic_metadata']>): void {
  const end = w.open(4, metadataLength(md));
  for (const [k, v] of Object.entries(md.fields)) {
    const entry = w.open(1, entryLength(k, v.stringValue));
    w.text(1, k);
    const value = w.open(2, textLength(v.stringValue));
    w.text(3, v.stringValue);
    w.close(value);
    w.close(entry);
  }
  w.close(end);
}

/** `r` in protobuf wire format; `r` must be `writable`. Throws rather than write framing that disagrees. */
export function encodeCheckResponse(r: CheckResponse): Buffer {
  const { ok_response: ok, denied_response: denied, dynamic_metadata: md } = r;
  const status = statusLength(r.status);
  const total =
    framed(status) +
    (ok ? framed(okLength(ok)) : 0) +
    (denied ? framed(deniedLength(denied)) : 0) +
    (md ? framed(metadataLength(md)) : 0);
  const w = new Writer(Buffer.allocUnsafe(total));
  const end = w.open(1, status);
  w.number(1, r.status.code);
  if (r.status.message !== undefined) w.text(2, r.status.message);
  w.close(end);
  if (denied) writeDenied(w, denied);
  if (ok) writeOk(w, ok);
  if (md) writeMetadata(w, md);
  w.close(total);
  return w.buf;
}

/**
 * The Check method's response serialiser: this file's writer, the generic one for anything else,
 * and for an answer this writer refuses half way (`onFallback` is told, without the answer's content:
 * it holds headers such as credentials' ids). Whatever the generic serialiser throws, grpc-js answers
 * INTERNAL, which Envoy treats as a deny (failure_mode_allow off, SPEC 1).
 */
export function checkResponseSerializer(
  generic: (r: CheckResponse) => Buffer,
  onFallback: () => void = () => {},
): (r: CheckResponse) => Buffer {
  return (r) => {
    try {
      if (writable(r)) return encodeCheckResponse(r);
    } catch {
      onFallback();
    }
    return generic(r);
  };
}
