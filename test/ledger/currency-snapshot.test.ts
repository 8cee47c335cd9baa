/**
 * The ledger's currency snapshot (issue 21 item 2: admin's table is the one source of minor
 * units): before its first load a lookup is a 503 to retry, not "unknown currency"; afterwards
 * it answers from the table's rows, and a keypad amount in a currency the table lacks is refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AppError } from '../../shared/errors.ts';
import { displayDecimals, minorUnitsOf, setCurrencies } from '../../core/ledger/currency.ts';
import { amountTyped } from '../../core/agents/ussd/common.ts';

describe('ledger currency snapshot', () => {
  it('answers 503 SERVICE_UNAVAILABLE before its first load, then the loaded minor units', () => {
    assert.throws(
      () => minorUnitsOf('KES'),
      (e: unknown) => e instanceof AppError && e.code === 'SERVICE_UNAVAILABLE' && e.status === 503,
    );
    setCurrencies([
      ['KES', 2],
      ['UGX', 0],
    ]);
    assert.equal(minorUnitsOf('KES'), 2);
    assert.equal(minorUnitsOf('UGX'), 0);
    assert.equal(minorUnitsOf('XXX'), undefined);
    assert.equal(displayDecimals('UGX'), 0);
  });

  it('refuses a keypad amount in a currency the table lacks, and finer than its minor units', () => {
    setCurrencies([['UGX', 0]]);
    assert.equal(amountTyped('100', 'XXX'), undefined);
    assert.equal(amountTyped('100.5', 'UGX'), undefined);
    assert.equal(amountTyped('100', 'UGX'), 100_000_000n);
  });
});
