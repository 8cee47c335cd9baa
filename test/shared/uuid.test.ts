/** uuidv7 (RFC 9562 version 7): the time prefix, the version and variant bits, no repeats across the random pool's refills. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { uuidv7 } from '../../shared/uuid.ts';

describe('uuidv7', () => {
  it('carries the millisecond time in its first 48 bits, version 7 and the RFC variant', () => {
    const id = uuidv7(0x0123456789ab);
    assert.match(id, /^01234567-89ab-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('never repeats across many refills of the random pool, and sorts by time', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 5000; i++) seen.add(uuidv7(1_700_000_000_000));
    assert.equal(seen.size, 5000);
    assert.ok(uuidv7(1_700_000_000_000) < uuidv7(1_700_000_000_001));
  });
});
