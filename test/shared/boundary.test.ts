/**
 * The process boundary (DESIGN "Processes"): edge/ and core/ never import each other; what both
 * need lives in shared/ (and the policy runtime in policy/runtime/), which imports neither. A
 * static import, a re-export, a dynamic import() or a worker's new URL(...) across the line fails.
 */
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join, posix, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** The repository-relative targets of every relative module reference in `source`. */
function referencedPaths(file: string, source: string): string[] {
  const re = /(?:\bfrom\s+|\bimport\s+|\bimport\(\s*|\bnew URL\(\s*)(['"])(\.{1,2}\/[^'"]*)\1/g;
  const out: string[] = [];
  for (const m of source.matchAll(re))
    out.push(posix.normalize(posix.join(posix.dirname(file), m[2] as string)));
  return out;
}

async function sources(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(join(root, dir), { withFileTypes: true })) {
    const p = posix.join(dir, e.name);
    if (e.isDirectory()) out.push(...(await sources(p)));
    else if (/\.(ts|mts|mjs|js)$/.test(e.name)) out.push(p);
  }
  return out;
}

/** layer → the top-level folders its files must never reference. */
const forbidden: Record<string, string[]> = {
  edge: ['core/', 'bin/'],
  core: ['edge/', 'bin/'],
  shared: ['edge/', 'core/', 'bin/', 'policy/'],
  'policy/runtime': ['edge/', 'core/', 'bin/'],
};

async function crossings(): Promise<string[]> {
  const found: string[] = [];
  for (const [layer, banned] of Object.entries(forbidden)) {
    for (const file of await sources(layer)) {
      const text = await readFile(join(root, file), 'utf8');
      for (const target of referencedPaths(file, text)) {
        if (banned.some((b) => target.startsWith(b))) found.push(`${file} → ${target}`);
      }
    }
  }
  return found;
}

describe('process boundary', () => {
  it('finds a crossing in each form a module can reference another', () => {
    const refs = referencedPaths(
      'edge/x/a.ts',
      [
        "import { a } from '../../core/db/pool.ts';",
        "export { b } from '../../core/keys/keys.ts';",
        "const m = await import('../../core/app.ts');",
        "new Worker(new URL('../../core/worker.mjs', import.meta.url));",
        "import '../../core/side-effect.ts';",
      ].join('\n'),
    );
    assert.deepEqual(refs, [
      'core/db/pool.ts',
      'core/keys/keys.ts',
      'core/app.ts',
      'core/worker.mjs',
      'core/side-effect.ts',
    ]);
  });

  it('edge and core never import each other; shared and the policy runtime import neither', async () => {
    assert.deepEqual(await crossings(), []);
  });

  it('the scanner sees the whole tree (it is not looking at an empty folder)', async () => {
    for (const layer of Object.keys(forbidden))
      assert.ok((await sources(layer)).length > 0, `${layer} has sources`);
    assert.equal(relative(root, join(root, 'edge')), 'edge');
  });
});
