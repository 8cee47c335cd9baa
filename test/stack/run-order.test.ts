/** test/run-order.ts: the order `npm test` starts its files in (the longest first). */
import assert from 'node:assert/strict';
import { access } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { inRunOrder, longest } from '../run-order.ts';

describe('the order npm test starts its files in', () => {
  it('starts the longest files first, longest first, then the rest in the order given', () => {
    const files = [
      'test/admin/routes.test.ts',
      'test/e2e/services-proof.test.ts',
      'test/e2e/transfers.test.ts',
      'test/stack/attack23-services.test.ts',
      'test/stack/warm.test.ts',
    ];
    assert.deepEqual(inRunOrder(files), [
      'test/stack/attack23-services.test.ts',
      'test/e2e/services-proof.test.ts',
      'test/admin/routes.test.ts',
      'test/e2e/transfers.test.ts',
      'test/stack/warm.test.ts',
    ]);
  });

  it('starts only the files given (a filtered run), each once', () => {
    assert.deepEqual(inRunOrder(['test/shared/uuid.test.ts']), ['test/shared/uuid.test.ts']);
    assert.deepEqual(inRunOrder([]), []);
  });

  it('lists files that exist (a renamed one would start last unnoticed), longest first', async () => {
    for (const [file] of longest) await access(new URL(`../../${file}`, import.meta.url));
    const seconds = longest.map(([, s]) => s);
    assert.deepEqual(
      seconds,
      [...seconds].sort((a, b) => b - a),
    );
  });
});
