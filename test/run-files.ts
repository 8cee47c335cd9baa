/**
 * The test runner process test/run.ts starts: node's runner (`run` of node:test) over the files
 * given, in the order given, `--concurrency` at a time, each file its own process, reported by
 * the spec reporter; exits 1 when a test failed. What `node --test` does, but `node --test` sorts
 * its files by name, and the order is chosen (test/run-order.ts). `--timeout` bounds each file
 * (as `node --test` does with its --test-timeout); the per-test bound is this process's own
 * --test-timeout flag, which each file's process is started with.
 */
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { parseArgs } from 'node:util';

const { values, positionals: files } = parseArgs({
  options: { concurrency: { type: 'string' }, timeout: { type: 'string' } },
  allowPositionals: true,
});
const concurrency = Number(values.concurrency);
const timeout = Number(values.timeout);
if (!Number.isInteger(concurrency) || concurrency < 1 || !Number.isInteger(timeout) || files.length === 0)
  throw new Error('usage: run-files.ts --concurrency=N --timeout=MS FILE…');

const stream = run({ files, concurrency, timeout });
// As `node --test`: a failed todo test does not fail the run.
stream.on('test:fail', (data) => {
  if (!data.todo) process.exitCode = 1;
});
stream.compose(new spec()).pipe(process.stdout);
