/**
 * The edge's old generation, kept from growing far between major GCs (issue 18 item 1). Node's
 * HTTP/2 hands every header value of every gRPC call to JavaScript as an external string, and a
 * major GC clears all of those served since the previous one in its atomic pause, with weak global
 * handles of the same age (`--trace-gc-nvp`: 67-82 ms and 53-126 ms in the clear phase). With V8's
 * own growth the old generation reached about 3.5x what a major kept (28 MB kept, the next major at
 * 100-118 MB, a minute apart at 1,000 Checks/s): pauses of 88-303 ms, each answering every Check
 * in flight fail-closed (the budget is 100 ms). The bound is in bytes, so a major clears about the
 * same number of calls' garbage at any rate. Measured with the authz bench (two rounds each): 25 %
 * growth gave GC pauses of at most 14 ms without the CPU hog and 24 ms with it, but no better p99.9
 * (10-29 ms per line) and a worse p99; 100 %, kept here, majors 7-21 s apart of 16-47 ms (a
 * `--trace-gc-nvp` run), GC pauses of at most 36 ms per line without the hog and up to 77 ms with
 * it on a loaded machine: bounded, not short.
 */
import { setFlagsFromString } from 'node:v8';

/** V8's `--heap-growing-percent`: the old generation's growth past a major GC's survivors. */
export const edgeHeapGrowingPercent = 100;

/**
 * The flag in any spelling node starts with and V8 reads: one or two leading dashes, `-` or `_`
 * between the words (`node --heap_growing_percent=0` is the same flag). NODE_OPTIONS cannot carry
 * it (node refuses to start), and its flags are not in execArgv anyway.
 */
const growthFlag = /^--?heap[-_]growing[-_]percent(=|$)/;

/**
 * Set once at the start of an edge process, before its load (bin/services/edge.ts, the authz
 * bench), unless the process was started with a growth of its own (`node --heap-growing-percent=N`;
 * 0 is V8's own): an operator's or a benchmark's choice stands.
 */
export function boundHeapGrowth(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.some((a) => growthFlag.test(a))) return false;
  setFlagsFromString(`--heap-growing-percent=${edgeHeapGrowingPercent}`);
  return true;
}
