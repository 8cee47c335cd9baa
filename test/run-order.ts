/**
 * The order test/run.ts hands the test files to node's runner, which starts them in that order,
 * four at a time. The longest files first (each starts processes or a whole stack, or waits out
 * production timeouts), then the rest in name order: in name order the run ended on test/stack/,
 * the longest folder, with one or two of its files alone on the machine (the silent-database one
 * waits 26 s on timeouts). A file missing here only starts later; a new long one belongs here.
 */

/** Seconds each took alone on the 2-core machine (`npm test -- <file>`), longest first. */
export const longest: readonly [file: string, seconds: number][] = [
  ['test/stack/attack23-services.test.ts', 37],
  ['test/stack/start-silent-db.test.ts', 26],
  ['test/e2e/policy-impact-bounds.test.ts', 20],
  ['test/stack/signals-start.test.ts', 15],
  ['test/e2e/services-proof.test.ts', 13],
  ['test/edge/state-listener.test.ts', 13],
  ['test/stack/services-orphans.test.ts', 13],
  ['test/ledger/property.test.ts', 13],
  ['test/e2e/onboarding.test.ts', 12],
  ['test/stack/services.test.ts', 12],
  ['test/stack/start-waits.test.ts', 12],
  ['test/e2e/docs-browser.test.ts', 12],
];

/** `files` (paths from the repository root, in name order) in the order to start them. */
export function inRunOrder(files: readonly string[]): string[] {
  const given = new Set(files);
  const first = longest.map(([file]) => file).filter((f) => given.has(f));
  const started = new Set(first);
  return [...first, ...files.filter((f) => !started.has(f))];
}
