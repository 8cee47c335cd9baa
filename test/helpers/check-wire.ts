/**
 * A strict reader of the CheckResponse wire format, independent of protobufjs: the oracle the
 * edge/encode.ts tests hold the hand-written answer to. It refuses what Envoy's C++ parser refuses
 * (a length past its message's end, a string that is not valid UTF-8, which proto3 forbids) and
 * also any field the edge never writes, so a stray byte cannot pass as an unknown field.
 */

/** A message read by field name; repeated and map fields are lists of what they hold. */
export interface WireMessage {
  [field: string]: WireValue[];
}
export type WireValue = number | string | WireMessage;

type Field = { name: string; kind: 'varint' | 'string' | Schema };
interface Schema {
  [number: number]: Field;
}

const boolValue: Schema = { 1: { name: 'value', kind: 'varint' } };
const headerValue: Schema = { 1: { name: 'key', kind: 'string' }, 2: { name: 'value', kind: 'string' } };
const headerOption: Schema = {
  1: { name: 'header', kind: headerValue },
  2: { name: 'append', kind: boolValue },
};
const value: Schema = { 3: { name: 'string_value', kind: 'string' } };
const struct: Schema = {
  1: { name: 'fields', kind: { 1: { name: 'key', kind: 'string' }, 2: { name: 'value', kind: value } } },
};
const checkResponse: Schema = {
  1: {
    name: 'status',
    kind: { 1: { name: 'code', kind: 'varint' }, 2: { name: 'message', kind: 'string' } },
  },
  2: {
    name: 'denied_response',
    kind: {
      1: { name: 'status', kind: { 1: { name: 'code', kind: 'varint' } } },
      2: { name: 'headers', kind: headerOption },
      3: { name: 'body', kind: 'string' },
    },
  },
  3: {
    name: 'ok_response',
    kind: { 2: { name: 'headers', kind: headerOption }, 5: { name: 'headers_to_remove', kind: 'string' } },
  },
  4: { name: 'dynamic_metadata', kind: struct },
};

const utf8 = new TextDecoder('utf-8', { fatal: true });

class Reader {
  constructor(
    readonly buf: Uint8Array,
    public at: number,
  ) {}

  varint(end: number): number {
    let n = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.at >= end) throw new Error(`varint runs past its message at ${this.at}`);
      const b = this.buf[this.at++] as number;
      n += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return n;
    }
    throw new Error('varint longer than 5 bytes');
  }
}

function readMessage(r: Reader, end: number, schema: Schema): WireMessage {
  const out: WireMessage = Object.create(null);
  while (r.at < end) {
    const tag = r.varint(end);
    const field = schema[tag >>> 3];
    if (!field) throw new Error(`field ${tag >>> 3} is not one the edge writes (at ${r.at})`);
    const list = (out[field.name] ??= []);
    if (field.kind === 'varint') {
      if ((tag & 7) !== 0) throw new Error(`${field.name}: wire type ${tag & 7}, expected varint`);
      list.push(r.varint(end));
      continue;
    }
    if ((tag & 7) !== 2) throw new Error(`${field.name}: wire type ${tag & 7}, expected length-delimited`);
    const length = r.varint(end);
    const stop = r.at + length;
    if (stop > end) throw new Error(`${field.name}: ${length} bytes run past its message`);
    if (field.kind === 'string') list.push(utf8.decode(r.buf.subarray(r.at, stop)));
    else list.push(readMessage(new Reader(r.buf, r.at), stop, field.kind));
    r.at = stop;
  }
  if (r.at !== end) throw new Error('message overruns its length');
  return out;
}

/** `bytes` read as a CheckResponse; throws on anything Envoy's parser or the edge's schema refuses. */
export function readCheckResponse(bytes: Uint8Array): WireMessage {
  return readMessage(new Reader(bytes, 0), bytes.length, checkResponse);
}

const only = (m: WireMessage | undefined, name: string): WireValue | undefined => {
  const list = m?.[name];
  if (list && list.length > 1) throw new Error(`${name} appears ${list.length} times`);
  return list?.[0];
};
const message = (v: WireValue | undefined): WireMessage | undefined =>
  typeof v === 'object' ? v : undefined;

/** What an allowing answer does to the upstream request's headers, as Envoy applies it. */
export function headerMutations(m: WireMessage): {
  set: Map<string, { value: string; append: boolean }>;
  remove: string[];
} {
  const ok = message(only(m, 'ok_response'));
  const set = new Map<string, { value: string; append: boolean }>();
  for (const o of ok?.headers ?? []) {
    const header = message(only(message(o), 'header'));
    const append = only(message(only(message(o), 'append')), 'value');
    set.set(String(only(header, 'key') ?? ''), {
      value: String(only(header, 'value') ?? ''),
      append: append === 1,
    });
  }
  return { set, remove: (ok?.headers_to_remove ?? []).map(String) };
}

/** `v` with every string made well-formed (a lone surrogate becomes U+FFFD, as a UTF-8 round trip does). */
export function wellFormed<T>(v: T): T {
  if (typeof v === 'string') return Buffer.from(v, 'utf8').toString('utf8') as T;
  if (Array.isArray(v)) return v.map(wellFormed) as T;
  if (typeof v === 'object' && v !== null)
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, wellFormed(x)])) as T;
  return v;
}
