/**
 * The edge's old generation, kept from growing far between major GCs (issue 18 item 1). Node's
 * HTTP/2 hands every header value of every gRPC call to JavaScript as an external string, and a
 * major GC clears all of those served since the previous one in its atomic pause, with weak global
 * handles of the same age (`--trace-gc-nvp`: 67-82 ms and 53-126 ms in the clear phase). With V8's
 * own growth the old generation reached about 3.5x what a major kept (28 MB kept, the next major at
 * 100-118 MB, a minute apart at 1,000 Checks/s): pauses of 88-303 ms, each answering every Check
 * in flight fail-closed (the budget is 100 ms). The bound is in bytes, so a major clears about the
 * same number of calls' garbage at any rate. Measured with the authz bench (two rounds each, quiet
 * machine): 25 % growth gave majors every few seconds of at most 24 ms (p99.9 about 22 ms on every
 * line); 100 %, kept here, majors about every 20 s of at most 36 ms.
 */
import { setFlagsFromString } from 'node:v8';

/** V8's `--heap-growing-percent`: the old generation's growth past a major GC's survivors. */
export const edgeHeapGrowingPercent = 100;

/**
 * Set once at the start of an edge process, before its load (bin/services/edge.ts, the authz
 * bench), unless the process was started with a growth of its own (`node --heap-growing-percent=N`;
 * 0 is V8's own): an operator's or a benchmark's choice stands.
 */
export function boundHeapGrowth(execArgv: readonly string[] = process.execArgv): boolean {
  if (execArgv.some((a) => a.startsWith('--heap-growing-percent'))) return false;
  setFlagsFromString(`--heap-growing-percent=${edgeHeapGrowingPercent}`);
  return true;
}
