/**
 * What a worker thread that loads candidate bundles holds them to: core's impact thread (replays
 * and uploads, core/policy/impact-thread.ts) and the edge's shadow thread (edge/shadow-thread.ts).
 * A candidate is signed, but it is an author's work under test: its WASM runs while it loads
 * (its start function, `builtins`, `entrypoints`, its allocator and JSON parser) and answers text
 * the host parses, so both threads bound how long a load takes and how much JSON they parse, and
 * write nothing it asks them to print.
 */

/**
 * How long a candidate's WASM may take to load (its start function, `builtins`, its data parsed):
 * the development bundle takes a few milliseconds. A module that loops while loading is refused
 * past it (core: the upload is 422; edge: the tenant's shadow is set aside until it changes).
 */
export const candidateLoadMs = 5_000;

/**
 * The longest JSON text such a thread parses (characters). opa-wasm parses what a candidate
 * answers (`builtins`, `entrypoints`, a result, a builtin's arguments) as text read from its
 * memory (up to 64 MiB: impactWasmMaxPages, shadowWasmMaxPages), and a JSON.parse builds up to
 * 29 times its text in heap (nested empty arrays): 4 MiB stays inside the threads' 256 MB heap
 * bound. A parse does not heed the worker's termination: a candidate answering 62 MiB of
 * `[[],[],…]` grew core's impact thread to about 900 MB, 16 MB at a time past its bound, in GC for
 * minutes after it was told to stop, and V8 then aborted core's process. Past the bound the parse
 * throws (a RangeError): the candidate does not load, or that evaluation fails.
 */
export const maxJsonTextChars = 4 * 2 ** 20;

let bounded = false;

/**
 * Bound every JSON.parse of this thread to maxJsonTextChars; called first by a thread that loads
 * candidates, never on a process's main thread (it bounds every parse there). Once per thread.
 */
export function boundJsonParse(): void {
  if (bounded) return;
  bounded = true;
  const parseJson = JSON.parse;
  JSON.parse = (text: string, reviver?: Parameters<typeof JSON.parse>[1]): unknown => {
    if (typeof text === 'string' && text.length > maxJsonTextChars)
      throw new RangeError(`a JSON text of ${text.length} characters, past ${maxJsonTextChars}`);
    return parseJson(text, reviver);
  };
}

/**
 * Silence this thread's console, once, first thing, on a thread that loads candidates (never on a
 * process's main thread). opa-wasm writes the text a module hands `opa_println` (an import of
 * OPA's WASM ABI, which a module may call as often as it likes, while it loads and at each
 * evaluation) with console.log, and a worker's console is its process's stdout, the log stream: a
 * candidate wrote lines of its choosing there (a forged log record; a live decision's input,
 * unscrubbed), megabytes at a time, each crossing to the main thread to be written. Nothing else
 * on these threads writes to the console. opa-wasm still builds the text: a long one costs the
 * candidate its deadline or its heap bound (the thread ends, and the candidate is refused or set aside).
 */
export function silenceConsole(): void {
  const nothing = (): void => undefined;
  for (const method of ['log', 'info', 'warn', 'error', 'debug', 'trace', 'dir', 'table'] as const)
    console[method] = nothing;
}
