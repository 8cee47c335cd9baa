/**
 * The README stands alone (issue 15 item 7): its worked `orig` example is recomputed from the
 * code that the edge and core use, and every file it points a reader to is in the clone.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { origOf } from '../../shared/challenge.ts';
import { intentPayload } from '../../core/payments/transfers.ts';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

describe('README', () => {
  it('works `orig` and the intent payload through exactly as the code computes them', () => {
    const section = readme.slice(readme.indexOf('**`orig`, worked through**'));
    const body = /\nPOST \/v1\/transfers\n(\{.*\})\n/.exec(section)?.[1];
    assert.ok(body, 'the example request body');
    const orig = origOf('POST', '/v1/transfers', body);
    assert.ok(section.includes(`so \`orig\` is \`${orig}\``), `orig is ${orig}`);
    const b = JSON.parse(body) as { amount: string; currency: string; beneficiaryId: string };
    assert.ok(
      section.includes(
        intentPayload({ amount: b.amount, currency: b.currency, beneficiaryId: b.beneficiaryId, orig }),
      ),
      'the signed intent',
    );
  });

  it('points to no file outside the clone, and every repository path it names exists', () => {
    assert.doesNotMatch(readme, /\.\.\/shared|\.\.\/[A-Za-z]/, 'no path outside the clone');
    const paths = new Set(
      [
        ...readme.matchAll(
          /`((?:core|edge|shared|policy|bin|test|deploy|bench|docs|proto)\/[\w./-]+\.(?:ts|md|json|rego|yaml|sh|proto))`/g,
        ),
      ].map((m) => m[1] as string),
    );
    assert.ok(paths.size > 10, 'the README names repository files');
    const missing = [...paths].filter((p) => !existsSync(new URL(`../../${p}`, import.meta.url)));
    assert.deepEqual(missing, []);
  });
});
