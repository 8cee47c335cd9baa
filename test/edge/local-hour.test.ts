import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { localHour } from '../../edge/authz.ts';

describe('tenant-local hour for hours caveats', () => {
  it("is the hour in the tenant's zone, UTC when none or an unknown one is set", () => {
    const at = Date.UTC(2026, 10, 22, 23, 30);
    assert.equal(localHour(at, 'Africa/Nairobi'), 2);
    assert.equal(localHour(at, 'Asia/Kolkata'), 5);
    assert.equal(localHour(at, undefined), 23);
    assert.equal(localHour(at, 'Mars/Olympus_Mons'), 23);
  });

  it('changes on the minute it should, though computed once per zone per minute', () => {
    // Kolkata is UTC+5:30: its hour turns when UTC reads hh:30.
    const before = Date.UTC(2026, 10, 22, 6, 29, 59, 999);
    assert.equal(localHour(before, 'Asia/Kolkata'), 11);
    assert.equal(localHour(before - 30_000, 'Asia/Kolkata'), 11);
    assert.equal(localHour(before + 1, 'Asia/Kolkata'), 12);
    assert.equal(
      localHour(before, 'Asia/Kolkata'),
      11,
      'an earlier time after a later one is not served from the later minute',
    );
  });
});
