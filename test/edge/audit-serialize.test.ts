/**
 * The decision audit's batch crosses to its thread as one JSON text, serialised on the thread
 * that answers Checks: in slices (edge/audit-writer.ts `serializeInSlices`), so a large batch
 * never holds that thread for the whole of it (issue 18 item 1), with the same text as one
 * `JSON.stringify` and the same refusal of numbers canonical JSON cannot hold.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RecordedEntry } from '../../edge/decision-inputs.ts';
import { serializeInSlices } from '../../edge/audit-writer.ts';

const entry = (i: number): RecordedEntry => ({
  tenantId: 't1',
  actor: { type: 'customer', id: `c-${i}` },
  action: 'transfer.create',
  target: { type: 'transfer', id: `x-${i}` },
  decision: { allow: true, purpose: 'payments', aal: 2 },
  attrs: { ip: '127.0.0.1', risk: 0.25, padding: 'p'.repeat(2_000) },
  replay: { input: { subject: { id: `c-${i}` }, n: [1, 2.5, -3] }, allow: true, policyVersion: 'v1' },
});

describe('decision audit batch serialisation', () => {
  it('gives the text one JSON.stringify of the batch gives, and lets other work run meanwhile', async () => {
    const batch = Array.from({ length: 2_000 }, (_, i) => entry(i));
    let ranDuring = 0;
    const other = setInterval(() => ranDuring++, 0);
    const text = await serializeInSlices(batch);
    clearInterval(other);
    assert.equal(text, JSON.stringify(batch));
    assert.ok(ranDuring > 0, 'a timer ran while the batch was serialised');
    assert.equal(await serializeInSlices([]), '[]');
  });

  it('refuses a number canonical JSON cannot hold, naming its key', async () => {
    const bad = { ...entry(1), attrs: { risk: Number.NaN } };
    await assert.rejects(serializeInSlices([entry(0), bad]), /audit value risk is NaN/);
  });
});
