/**
 * Whether a WASM module declares linear memory of its own, read from its section headers without
 * compiling or running anything. An OPA policy imports its memory (`env.memory`), which the host
 * creates with the bound it chooses (InstantiateOptions.maxMemoryPages); opa-wasm reads and writes
 * only that one. A memory the module declares itself is allocated at instantiation at the size the
 * module names (up to 4 GiB), past that bound, in the process that loads it, and no OPA policy
 * uses it.
 */

/** The memory section's id (WebAssembly core spec 5.5.8). */
const memorySectionId = 5;
const magic = [0x00, 0x61, 0x73, 0x6d];
/** The preamble: the magic and the version, 4 bytes each. */
const headerBytes = 8;

/** An unsigned LEB128 at `at`: its value and the offset after it, or undefined past the end or 5 bytes. */
function uleb(b: Buffer, at: number): { value: number; next: number } | undefined {
  let value = 0;
  for (let i = 0; i < 5; i++) {
    const byte = b[at + i];
    if (byte === undefined) return undefined;
    value += (byte & 0x7f) * 2 ** (7 * i);
    if (!(byte & 0x80)) return { value, next: at + i + 1 };
  }
  return undefined;
}

/**
 * True when `wasm` has a memory section declaring at least one memory. A module that is not WASM
 * or whose sections do not parse answers false: compiling it fails later, as the bundle's fault.
 */
export function declaresOwnMemory(wasm: Buffer): boolean {
  if (wasm.length < headerBytes || magic.some((m, i) => wasm[i] !== m)) return false;
  let at = headerBytes;
  while (at < wasm.length) {
    const id = wasm[at];
    const size = uleb(wasm, at + 1);
    if (id === undefined || !size) return false;
    if (id === memorySectionId) return (uleb(wasm, size.next)?.value ?? 0) > 0;
    at = size.next + size.value;
  }
  return false;
}
