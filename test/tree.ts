/**
 * The suite's copy of the repository, its TypeScript compiled once per run (test/run.ts).
 *
 * Loading TypeScript through tsx costs each test file's process about 0.8 CPU seconds more than
 * loading the same modules compiled (tsx's loader runs on a thread of its own and answers every
 * import across it), and the suite starts about two hundred such processes on two cores. So the
 * run compiles every `.ts` file once, with esbuild (what tsx itself compiles with), into a copy of
 * the tree beside the file it came from: `x.ts` stays (a child process a test starts with
 * `--import tsx`, or a worker thread that registers tsx, still loads it) and `x.js` is its
 * compiled form, whose relative imports name `.js`. Every other file is copied, so paths taken
 * from `import.meta.url` (migrations, pages, bundles, protos) find what they found in the tree;
 * `node_modules`, `.git` and the virtual environments are linked, not copied. Inline source maps
 * name the original files: a failing test's stack points at the `.ts` it came from.
 */
import { existsSync } from 'node:fs';
import { copyFile, mkdir, readdir, symlink, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { build, type Plugin } from 'esbuild';

/** Top-level entries linked rather than copied: large, or not the project's source. */
const linked = (name: string) => name === 'node_modules' || name === '.git' || name.startsWith('.venv');
/** Top-level entries left out: what `npm start` keeps at run time (each run makes its own). */
const skipped = new Set(['.data']);
/**
 * Marks a copy made here. A test that runs `npm test` itself (test/stack/signals-test) copies the
 * copy: there `x.js` beside `x.ts` is the compiled form, compiled again; in the repository it is
 * a mistake (which of the two would an import of `x.js` mean?).
 */
const marker = '.compiled-test-tree';

interface Walked {
  sources: string[];
  copied: number;
  /** Copying a copy (the marker is at its root). */
  copy: boolean;
}

async function copyTree(root: string, dir: string, out: string, walked: Walked): Promise<void> {
  await mkdir(join(out, relative(root, dir)), { recursive: true });
  const entries = await readdir(dir, { withFileTypes: true });
  const names = new Set(entries.map((e) => e.name));
  for (const entry of entries) {
    const from = join(dir, entry.name);
    const to = join(out, relative(root, from));
    if (dir === root && skipped.has(entry.name)) continue;
    if (dir === root && linked(entry.name)) await symlink(from, to);
    else if (entry.isDirectory()) await copyTree(root, from, out, walked);
    else if (entry.isFile()) {
      const source = entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts');
      const compiled = entry.name.endsWith('.js') && names.has(`${entry.name.slice(0, -3)}.ts`);
      if (compiled && walked.copy) continue;
      if (compiled) throw new Error(`${relative(root, from)}: a .ts file of the same name is beside it`);
      await copyFile(from, to);
      walked.copied += 1;
      if (source) walked.sources.push(from);
    }
  }
}

/**
 * Every import stays an import (nothing is bundled); a relative one naming a `.ts` file names its
 * compiled `.js` instead. esbuild calls this for import records only, never for strings that look
 * like imports (tests hold such strings as fixtures).
 */
const importsStayImports: Plugin = {
  name: 'imports-stay-imports',
  setup(b) {
    b.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      const relativeTs = /^\.\.?\//.test(args.path) && args.path.endsWith('.ts');
      return { path: relativeTs ? `${args.path.slice(0, -3)}.js` : args.path, external: true };
    });
  },
};

/** Copies `root` into `out` (which must not exist) and compiles its TypeScript there. */
export async function buildTestTree(
  root: string,
  out: string,
): Promise<{ compiled: number; copied: number }> {
  const walked: Walked = { sources: [], copied: 0, copy: existsSync(join(root, marker)) };
  await copyTree(root, root, out, walked);
  await writeFile(join(out, marker), 'A copy of the tree made by test/tree.ts for one test run.\n');
  await build({
    entryPoints: walked.sources,
    outbase: root,
    outdir: out,
    bundle: true,
    plugins: [importsStayImports],
    format: 'esm',
    platform: 'node',
    target: 'node20',
    tsconfig: join(root, 'tsconfig.json'),
    sourcemap: 'inline',
    logLevel: 'error',
  });
  return { compiled: walked.sources.length, copied: walked.copied };
}

/** Where the compiled form of `file` (relative to the tree's root, `.ts`) is in the copy. */
export function compiledPath(out: string, file: string): string {
  return join(out, file.replace(/\.ts$/, '.js'));
}
