/**
 * The policy's two entry points side by side (issue 18 item 1): the traced `decision` (with
 * every check's `reasons`, for simulate and a denial's audit) and the untraced `verdict` a Check
 * evaluates, on the same allow and deny inputs, interleaved in rounds so that load on a shared
 * machine weighs on both alike. The ratio is the figure to read.
 *   npx tsx bench/authz/entrypoints.ts
 */
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { runBench } from '../lib/harness.ts';
import { showingLoad } from '../lib/probe.ts';

const input = (resourceTenant: string) => ({
  tenant: { id: 't1', status: 'ACTIVE', security: {} },
  subject: {
    id: 'c1',
    type: 'customer',
    aal: 2,
    amr: ['pin', 'device'],
    roles: [],
    tuples: [{ relation: 'member', object_ns: 'tenant', object_id: 't1', caveat: {} }],
    stepup_bound: true,
  },
  resource: { type: 'transaction', id: '', tenant_id: resourceTenant, attrs: {} },
  action: 'transfer.create',
  purpose: 'customer.transact',
  context: {
    ip: '127.0.0.1',
    ua: 'bench',
    risk: 'low',
    time: new Date().toISOString(),
    now_ns: Date.now() * 1e6,
    local_hour: 12,
  },
});

async function measure(): Promise<void> {
  const policies = new PolicyStore(await loadTrustedKeys());
  const rev = await policies.load(defaultBundleDir);
  for (const [name, inp] of [
    ['transfer allowed', input('t1')],
    ['cross-tenant denied', input('t2')],
  ] as const) {
    const ns = { traced: 0, verdict: 0 };
    for (let round = 0; round < 10; round++) {
      for (const k of ['traced', 'verdict'] as const) {
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < 2000; i++) k === 'traced' ? rev.evaluate(inp) : rev.decide(inp);
        ns[k] += Number(process.hrtime.bigint() - t0);
      }
    }
    const us = (x: number) => (x / 20_000 / 1000).toFixed(1);
    process.stdout.write(
      `${name.padEnd(20)} traced decision ${us(ns.traced)} µs, verdict ${us(ns.verdict)} µs per evaluation (the trace costs ${(ns.traced / ns.verdict).toFixed(2)}x)\n`,
    );
  }
}

runBench(() => showingLoad(measure));
