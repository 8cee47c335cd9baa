/**
 * The edge process bounds its old generation's growth (edge/heap.ts, issue 18 item 1): under a
 * load that promotes garbage, its major GCs start at a smaller heap (so each clears less) than
 * with V8's own growth, and come more often. Measured from `--trace-gc` of two child processes
 * doing the same allocations.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { boundHeapGrowth } from '../../edge/heap.ts';

const run = promisify(execFile);
const load = join(import.meta.dirname, '../fixtures/promoting-load.ts');

/** The heap size (MB) at which each Mark-Compact of the main isolate started. */
async function majors(mode: 'bound' | 'default'): Promise<number[]> {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', '--trace-gc', load, mode], {
    maxBuffer: 16 * 1024 * 1024,
  });
  assert.match(stdout, /^done 100000$/m);
  return [...stdout.matchAll(/Mark-Compact ([\d.]+) \(/g)].map((m) => Number(m[1]));
}

describe('the edge process heap', () => {
  it('starts its major GCs at a smaller heap than V8 would, so each clears less', async () => {
    const [bound, own] = await Promise.all([majors('bound'), majors('default')]);
    assert.ok(own.length > 0 && bound.length > 0, 'the load made major GCs either way');
    const largest = (xs: number[]) => Math.max(...xs);
    assert.ok(
      largest(bound) < 0.85 * largest(own),
      `largest heap at a major: bound ${largest(bound)} MB, V8's own growth ${largest(own)} MB`,
    );
    assert.ok(bound.length > own.length, `majors: bound ${bound.length}, V8's own ${own.length}`);
  });
});

describe('the edge process heap bound, chosen otherwise', () => {
  it('leaves a growth the process was started with (an operator’s or a benchmark’s) as it is', () => {
    assert.equal(boundHeapGrowth(['--heap-growing-percent=0']), false);
    // Spellings node starts with and V8 reads as the same flag (`node --heap_growing_percent=0 -e …`).
    for (const flag of ['--heap_growing_percent=0', '--heap-growing_percent=0', '-heap-growing-percent=0'])
      assert.equal(boundHeapGrowth(['--import', 'tsx', flag]), false, flag);
  });

  it('bounds a process started without one, whatever else it was started with', () => {
    assert.equal(boundHeapGrowth(['--import', 'tsx', '--max-old-space-size=512']), true);
  });
});
