/**
 * Summarise a V8 CPU profile (`node --cpu-prof`, or one line's from bench/authz/line-profiles.mjs):
 * self time by function and by package, the table the README's profile figures come from. With
 * `--minus <other>`, what the first profile's busy time has over the other's, by function and by
 * package (a scenario's line against the floor's: what the decision adds per 5,000 Checks).
 *   npx tsx bench/lib/profile-summary.ts <file.cpuprofile> [top=25] [--minus <other.cpuprofile>]
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

const args = process.argv.slice(2);
const minusAt = args.indexOf('--minus');
const other = minusAt >= 0 ? args[minusAt + 1] : undefined;
const positional = minusAt >= 0 ? args.filter((_, i) => i !== minusAt && i !== minusAt + 1) : args;
const file = positional[0];
if (!file || (minusAt >= 0 && !other)) {
  process.stderr.write('usage: profile-summary.ts <file.cpuprofile> [top] [--minus <other.cpuprofile>]\n');
  process.exit(2);
}
const top = Number(positional[1] ?? 25);

const where = (url: string): string => {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1] as string;
  if (url.startsWith('node:')) return 'node core';
  if (url === '') return '(vm)';
  return url.replace(/^.*?\/wt-[^/]+\//, '').replace(/^file:\/\//, '');
};
/** Self time of one profile, by function and by package; `busy` leaves out the idle samples. */
function summarise(path: string) {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  let idle = 0;
  const fn = new Map<string, number>();
  const pkg = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const n = byId.get(id);
    if (!n) continue;
    if (n.callFrame.functionName === '(idle)') idle += us;
    const name = `${n.callFrame.functionName || '(anonymous)'}  ${where(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
    fn.set(name, (fn.get(name) ?? 0) + us);
    const p = where(n.callFrame.url)
      .replace(/:.*$/, '')
      .replace(/\/[^/]*$/, (s) => (s.includes('.') ? '' : s));
    pkg.set(p, (pkg.get(p) ?? 0) + us);
  }
  return { total, busy: total - idle, fn, pkg };
}

const a = summarise(file);
const ms = (us: number) => (us / 1000).toFixed(0).padStart(6);
const show = (m: Map<string, number>, k: number, total: number) =>
  [...m.entries()]
    .sort((x, y) => y[1] - x[1])
    .slice(0, k)
    .map(([n, us]) => `${((100 * us) / total).toFixed(1).padStart(5)} %  ${ms(us)} ms  ${n}`)
    .join('\n');
if (other === undefined) {
  process.stdout.write(
    `total ${(a.total / 1000).toFixed(0)} ms sampled, ${(a.busy / 1000).toFixed(0)} ms busy\n\nself time by function:\n${show(a.fn, top, a.total)}\n\nself time by package or directory:\n${show(a.pkg, 15, a.total)}\n`,
  );
} else {
  const b = summarise(other);
  /** What `a` spends over `b` per key, largest first. */
  const over = (x: Map<string, number>, y: Map<string, number>, k: number) =>
    [...new Set([...x.keys(), ...y.keys()])]
      .map((key): [string, number, number, number] => [
        key,
        (x.get(key) ?? 0) - (y.get(key) ?? 0),
        y.get(key) ?? 0,
        x.get(key) ?? 0,
      ])
      .sort((p, q) => q[1] - p[1])
      .slice(0, k)
      .map(([key, d, bUs, aUs]) => `${ms(d)} ms  (${ms(bUs)} → ${ms(aUs)})  ${key}`)
      .join('\n');
  process.stdout.write(
    `busy ${(a.busy / 1000).toFixed(0)} ms against ${(b.busy / 1000).toFixed(0)} ms: ${((a.busy - b.busy) / 1000).toFixed(0)} ms more\n\nmore self time by function:\n${over(a.fn, b.fn, top)}\n\nmore self time by package or directory:\n${over(a.pkg, b.pkg, 15)}\n`,
  );
}
