/**
 * Summarise a V8 CPU profile (`node --cpu-prof`): self time by function and by package, the
 * table the README's profile figures come from.
 *   npx tsx bench/lib/profile-summary.ts <file.cpuprofile> [top=25]
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

const file = process.argv[2];
if (!file) {
  process.stderr.write('usage: profile-summary.ts <file.cpuprofile> [top]\n');
  process.exit(2);
}
const top = Number(process.argv[3] ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);

const where = (url: string): string => {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1] as string;
  if (url.startsWith('node:')) return 'node core';
  if (url === '') return '(vm)';
  return url.replace(/^.*?\/wt-[^/]+\//, '').replace(/^file:\/\//, '');
};
const fn = new Map<string, number>();
const pkg = new Map<string, number>();
for (const [id, us] of selfUs) {
  const n = byId.get(id);
  if (!n) continue;
  const name = `${n.callFrame.functionName || '(anonymous)'}  ${where(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
  fn.set(name, (fn.get(name) ?? 0) + us);
  const p = where(n.callFrame.url)
    .replace(/:.*$/, '')
    .replace(/\/[^/]*$/, (s) => (s.includes('.') ? '' : s));
  pkg.set(p, (pkg.get(p) ?? 0) + us);
}
const show = (m: Map<string, number>, k: number) =>
  [...m.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, k)
    .map(
      ([n, us]) =>
        `${((100 * us) / total).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(0).padStart(6)} ms  ${n}`,
    )
    .join('\n');
process.stdout.write(
  `total ${(total / 1000).toFixed(0)} ms sampled\n\nself time by function:\n${show(fn, top)}\n\nself time by package or directory:\n${show(pkg, 15)}\n`,
);
