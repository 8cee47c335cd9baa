/**
 * Hand-made WASM modules that speak the part of OPA's ABI that loading a policy calls (opa-wasm's
 * loadPolicy and setData: `builtins`, `entrypoints`, `opa_json_dump`, `opa_malloc`,
 * `opa_json_parse`, the heap pointer), so a test can give a candidate a module that misbehaves
 * while it loads, as no `opa build` output does. Only `builtins` differs between them (and
 * printingWasm's, which imports `opa_println`, a function of OPA's WASM ABI the host provides).
 */

/** Unsigned LEB128. */
const uleb = (n: number): number[] => {
  const out: number[] = [];
  let v = n;
  do {
    let b = v & 0x7f;
    v >>>= 7;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
};

/** Signed LEB128 (i32.const immediates). */
const sleb = (n: number): number[] => {
  const out: number[] = [];
  let v = n;
  for (;;) {
    const b = v & 0x7f;
    v >>= 7;
    if ((v === 0 && !(b & 0x40)) || (v === -1 && b & 0x40)) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
};

const vec = (items: number[][]) => [...uleb(items.length), ...items.flat()];
const name = (t: string) => [...uleb(t.length), ...Buffer.from(t)];
const section = (id: number, body: number[]) => [id, ...uleb(body.length), ...body];
/** A function body: `i32Locals` locals of type i32, then `code`. */
const body = (code: number[], i32Locals = 0) => {
  const b = [...(i32Locals ? [1, i32Locals, 0x7f] : [0]), ...code, 0x0b];
  return [...uleb(b.length), ...b];
};

/** Where the module keeps `{}` (every JSON it answers) and a text that is not JSON. */
const emptyObjectAt = 16;
const notJsonAt = 32;

/** What `builtins` (function 0, `() -> i32`, the address of its JSON) does while the policy loads. */
export const builtinsBodies = {
  /** Answers `{}`: the module loads. */
  sound: [0x41, ...sleb(emptyObjectAt)],
  /** Calls itself without end: the call stack runs out (a RangeError). */
  recursing: [0x10, 0],
  /** Answers text that is not JSON (a SyntaxError in the host). */
  notJson: [0x41, ...sleb(notJsonAt)],
  /** Loops for ever. */
  looping: [0x03, 0x40, 0x0c, 0x00, 0x0b, 0x00],
  /** Answers an address past its memory: opa-wasm's host looks for the text's end there for ever. */
  pointingOutside: [0x41, ...sleb(0x40000000)],
  /** Writes ones over the first 1.5 GiB of its memory (memory.fill: every page of it in use), then answers `{}`. */
  filling: [0x41, 0, 0x41, 1, 0x41, ...sleb(0x60000000), 0xfc, 0x0b, 0x00, 0x41, ...sleb(emptyObjectAt)],
  /**
   * Grows its memory a page at a time as far as the host lets it, fills it with `[[],[],…]` and
   * answers that: the host parses into its heap about 14 times the text (21 million empty arrays
   * for the 62 MiB of a 64 MiB memory).
   */
  inflating: [
    ...[0x03, 0x40, 0x41, 1, 0x40, 0x00, 0x41, 0x7f, 0x47, 0x0d, 0, 0x0b], // loop: grow 1 until it answers -1
    ...[0x41, ...sleb(65_536), 0x41, ...sleb(0x5b), 0x3a, 0, 0], // '[' at 65536
    ...[0x41, ...sleb(65_537), 0x21, 0], // local 0 = 65537
    ...[0x03, 0x40], // loop
    ...[0x20, 0, 0x41, ...sleb(0x2c5d5b), 0x36, 0, 0], // '[],' and a NUL at local 0
    ...[0x20, 0, 0x41, 3, 0x6a, 0x22, 0], // local 0 += 3
    ...[0x3f, 0, 0x41, 16, 0x74, 0x41, 8, 0x6b, 0x49, 0x0d, 0, 0x0b], // while below its size less 8; end
    ...[0x20, 0, 0x41, 1, 0x6b, 0x41, ...sleb(0x5d), 0x3a, 0, 0], // the last ',' made ']'
    ...[0x41, ...sleb(65_536)],
  ],
} as const;

/**
 * Linear memory a module may declare as its own instead of importing opa-wasm's `env.memory`
 * (64 KiB pages): 24,576 = 1.5 GiB, allocated at instantiation whatever bound the host gave the
 * memory it imports.
 */
export const ownMemoryPages = 24_576;

/**
 * A module whose `builtins` does `kind`; everything else answers as a policy with no entry points.
 * `memory: 'own'` declares its own linear memory of ownMemoryPages instead of importing `env.memory`.
 */
export function probeWasm(
  kind: keyof typeof builtinsBodies,
  memory: 'imported' | 'own' = 'imported',
): Buffer {
  return assemble([...builtinsBodies[kind]], { memory });
}

/** Where printingWasm keeps the text it prints. */
const printedTextAt = 1024;

/**
 * A module whose `builtins` prints with opa-wasm's `opa_println` (the host writes it with
 * console.log) `text`, or `bytes` letters written past its first page (its memory grown to hold
 * them), then answers `{}`: the module loads.
 */
export function printingWasm(
  what: { text: string } | { bytes: number },
  via: 'opa_println' | 'opa_abort' = 'opa_println',
): Buffer {
  // Function 0 is the imported opa_println, (i32) -> ().
  const print = (at: number) => [0x41, ...sleb(at), 0x10, 0];
  if ('text' in what)
    return assemble([...print(printedTextAt), 0x41, ...sleb(emptyObjectAt)], {
      println: via,
      data: [[printedTextAt, `${what.text}\0`]],
    });
  const pages = Math.ceil((65_536 + what.bytes + 1) / 65_536);
  return assemble(
    [
      ...[0x41, ...sleb(pages), 0x40, 0x00, 0x1a], // memory.grow; drop
      ...[0x41, ...sleb(65_536), 0x41, ...sleb(0x41), 0x41, ...sleb(what.bytes), 0xfc, 0x0b, 0x00], // memory.fill 'A'
      ...print(65_536),
      ...[0x41, ...sleb(emptyObjectAt)],
    ],
    { println: via },
  );
}

/**
 * The module: `builtins` runs `builtinsCode` (function 0, or 1 after an imported `opa_println`),
 * the rest of the ABI answers as a policy with no entry points.
 */
function assemble(
  builtinsCode: number[],
  o: { memory?: 'imported' | 'own'; println?: 'opa_println' | 'opa_abort'; data?: [number, string][] },
): Buffer {
  const own = o.memory === 'own';
  const types = vec([
    [0x60, 0, 1, 0x7f], // () -> i32
    [0x60, 1, 0x7f, 1, 0x7f], // (i32) -> i32
    [0x60, 2, 0x7f, 0x7f, 1, 0x7f], // (i32, i32) -> i32
    [0x60, 1, 0x7f, 0], // (i32) -> ()
  ]);
  const imports = vec([
    ...(own ? [] : [[...name('env'), ...name('memory'), 0x02, 0x00, 1]]),
    ...(o.println ? [[...name('env'), ...name(o.println), 0x00, 3]] : []),
  ]);
  const first = o.println ? 1 : 0;
  const memories = own ? section(5, vec([[0x00, ...uleb(ownMemoryPages)]])) : [];
  const exported = [
    'builtins',
    'entrypoints',
    'opa_json_dump',
    'opa_malloc',
    'opa_json_parse',
    'opa_heap_ptr_get',
    'opa_heap_ptr_set',
  ];
  const functions = vec([[0], [0], [1], [1], [2], [0], [3]]);
  const globals = vec([
    [0x7f, 0, 0x41, 1, 0x0b],
    [0x7f, 0, 0x41, 1, 0x0b],
  ]);
  const exports = vec([
    ...exported.map((n, i) => [...name(n), 0x00, first + i]),
    [...name('opa_wasm_abi_version'), 0x03, 0],
    [...name('opa_wasm_abi_minor_version'), 0x03, 1],
  ]);
  const code = vec([
    body(builtinsCode, 1),
    body([0x41, ...sleb(emptyObjectAt)]), // entrypoints: {}
    body([0x20, 0]), // opa_json_dump: a value's address is its text's
    body([0x41, ...sleb(4096)]), // opa_malloc: one fixed place
    body([0x41, 1]), // opa_json_parse: some value
    body([0x41, ...sleb(65_536)]), // opa_heap_ptr_get
    body([]), // opa_heap_ptr_set
  ]);
  const segments: [number, string][] = [
    [emptyObjectAt, '{}\0'],
    [notJsonAt, 'not json\0'],
    ...(o.data ?? []),
  ];
  const data = vec(
    segments.map(([at, text]) => {
      const bytes = Buffer.from(text);
      return [0, 0x41, ...sleb(at), 0x0b, ...uleb(bytes.length), ...bytes];
    }),
  );
  return Buffer.from([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, types),
    ...section(2, imports),
    ...section(3, functions),
    ...memories,
    ...section(6, globals),
    ...section(7, exports),
    ...section(10, code),
    ...section(11, data),
  ]);
}
