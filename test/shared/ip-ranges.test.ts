/**
 * shared/ip-ranges.ts, the one range reader of the edge and core, against the reading that
 * decides every other request: the committed policy bundle's `net.cidr_contains` (WASM), asked
 * through the policy's own tenant_ip_ranges check.
 */
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import {
  defaultBundleDir,
  loadBundle,
  loadTrustedKeys,
  type PolicyRevision,
} from '../../policy/runtime/bundle.ts';
import {
  addressAllowed,
  inputForPolicy,
  insideRanges,
  parseCidr,
  rangeText,
  readRange,
  unreadableRange,
} from '../../shared/ip-ranges.ts';

/** [range, caller, inside] as the policy reads them; each row is checked against the bundle too. */
const cases: [string, string, boolean][] = [
  ['10.0.0.0/8', '10.1.2.3', true],
  ['10.0.0.0/8', '11.0.0.1', false],
  ['10.1.2.3/32', '10.1.2.3', true],
  ['0.0.0.0/0', '203.0.113.9', true],
  ['10.255.0.0/9', '10.128.0.1', true],
  ['10.255.0.0/9', '10.127.0.1', false],
  // No range holds an address of the other family.
  ['::/0', '127.0.0.1', false],
  ['::/0', '10.0.0.1', false],
  ['0.0.0.0/0', '2001:db8::1', false],
  ['::/0', '2001:db8::1', true],
  ['2001:db8::/32', '2001:DB8:0:1::5', true],
  ['2001:db8::/33', '2001:db8:8000::1', false],
  ['::1/128', '::1', true],
  // An IPv4-mapped address is an IPv6 address: IPv6 ranges hold it, IPv4 ranges do not...
  ['::/0', '::ffff:10.0.0.1', true],
  ['10.0.0.0/8', '::ffff:10.0.0.1', false],
  ['::ffff:10.0.0.0/104', '::ffff:10.0.0.1', true],
  ['::ffff:10.0.0.0/104', '::ffff:a00:1', true],
  ['::ffff:0:0/96', '::ffff:192.0.2.1', true],
  ['::ffff:10.0.0.0/104', '::ffff:11.0.0.1', false],
  // ...and an IPv4-mapped range holds no IPv4 address.
  ['::ffff:10.0.0.0/104', '10.0.0.1', false],
  ['::ffff:127.0.0.0/104', '127.0.0.1', false],
  // IPv4-compatible is plain IPv6.
  ['::10.0.0.0/104', '::10.0.0.1', true],
  ['10.0.0.0/8', '::10.0.0.1', false],
  // Host bits in a range are ignored, as the policy masks them.
  ['10.1.2.3/8', '10.9.9.9', true],
  // What is not a range holds nothing; what is not an address is inside nothing.
  ['10.0.0.1', '10.0.0.1', false],
  [' 10.0.0.0/8', '10.0.0.1', false],
  ['10.0.0.0/33', '10.0.0.1', false],
  ['fe80::%eth0/10', 'fe80::1', false],
  ['10.0.0.0/8', '10.0.0.1%eth0', false],
  ['fe80::/10', 'fe80::1%eth0', false],
  ['10.0.0.0/8', '', false],
  ['10.0.0.0/8', 'localhost', false],
  ['10.0.0.0/8', '10.0.0.256', false],
  ['10.0.0.0/8', '010.0.0.1', false],
  ['', '10.0.0.1', false],
  ['/', '10.0.0.1', false],
];

/**
 * Ranges whose prefix is not all digits. The policy's WASM net.cidr_contains leaves the prefix
 * unset when it is not (opa_atoi64 answers -2, only -1 is checked) and reads whatever was there:
 * `10.0.0.0/8 ` was seen inside and outside for the same caller, call after call. No reading can
 * agree with that, so every write path refuses these (parseCidr, readRange) and they hold nothing.
 */
const undefinedInPolicy = ['10.0.0.0/8 ', '10.0.0.0/x', '10.0.0.0/8x', 'fe80::/10%eth0', '10.0.0.0/'];

/**
 * Ranges and callers in every notation a caller or an Admin may write: dotted IPv4, full,
 * compressed and upper-case IPv6, groups with leading zeros, IPv4-mapped (dotted and hex),
 * IPv4-compatible and NAT64 addresses. Seeded, so a disagreement is reproducible.
 */
function notations(seed: number): { range: string; ip: string }[] {
  let state = seed;
  const next = (n: number) => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state >>> 8) % n;
  };
  const v4 = () =>
    next(2) ? `10.${next(4)}.${next(4)}.${next(256)}` : `${next(256)}.${next(256)}.${next(256)}.${next(256)}`;
  const group = () =>
    [
      () => '0',
      () => next(0x10000).toString(16),
      () => next(0x10000).toString(16).toUpperCase(),
      () => `00${next(16).toString(16)}`,
    ][next(4)]?.() ?? '0';
  const v6 = () => {
    const g = Array.from({ length: 8 }, group);
    const from = next(8);
    const to = from + 1 + next(8 - from);
    return [
      `::ffff:${v4()}`,
      `::ffff:${group()}:${group()}`,
      `::${v4()}`,
      `64:ff9b::${v4()}`,
      `${g.slice(0, from).join(':')}::${g.slice(to).join(':')}`,
      g.join(':'),
    ][next(6)] as string;
  };
  const address = () => (next(2) ? v4() : v6());
  return Array.from({ length: 3000 }, () => {
    const a = address();
    const range = `${a}/${next(a.includes(':') ? 129 : 33)}`;
    return { range, ip: next(3) === 0 ? a : address() };
  });
}

describe('IP ranges as the policy reads them (shared/ip-ranges.ts)', () => {
  let policy: PolicyRevision;
  before(async () => {
    policy = await loadBundle(defaultBundleDir, await loadTrustedKeys());
  });

  /** The policy's own answer: its tenant_ip_ranges check for a tenant with these ranges. */
  const policyInside = (ranges: unknown, ip: string): boolean => {
    const d = policy.evaluate({
      tenant: { id: 't1', security: { allowed_ip_ranges: ranges } },
      subject: { id: 'c', type: 'customer', aal: 1, tuples: [] },
      resource: { type: 'account', tenant_id: 't1' },
      action: 'account.read',
      purpose: 'customer.account.view',
      context: { ip, risk: 'low', now_ns: Date.now() * 1e6 },
    });
    const check = d.reasons.find((r) => r.check === 'tenant_ip_ranges');
    assert.ok(check, 'the policy reports its tenant_ip_ranges check');
    return check.ok;
  };

  it('agrees with the policy bundle on every case, and each case is as documented', () => {
    for (const [range, ip, inside] of cases) {
      const what = `${JSON.stringify(ip)} in ${JSON.stringify(range)}`;
      assert.equal(policyInside([range], ip), inside, `the policy: ${what}`);
      assert.equal(insideRanges([range], ip), inside, `shared reader: ${what}`);
    }
  });

  it('agrees with the policy bundle on ranges and callers in every notation', () => {
    let inside = 0;
    for (const { range, ip } of notations(20261124)) {
      const expected = policyInside([range], ip);
      assert.equal(insideRanges([range], ip), expected, `${JSON.stringify(ip)} in ${JSON.stringify(range)}`);
      if (expected) inside++;
    }
    assert.ok(inside > 300, `the cases hold callers inside as well as outside (${inside} inside)`);
  });

  it("a range stored before the policy's reading was enforced holds no caller, whatever another tenant's request asked just before", () => {
    // The previous release validated allowed_ip_ranges with a trimming parser, so a tenant may
    // hold `10.0.0.0/8 ` (a trailing space) or similar. The edge gives the stored list to the policy
    // as it is; core (shared/ip-ranges.ts) reads such an entry as no range. The policy must agree,
    // and above all must not take the prefix another tenant's request just used: after a /0 every
    // caller would be inside.
    for (const stored of undefinedInPolicy)
      for (const previous of [['0.0.0.0/0'], ['::/0'], ['10.0.0.0/8']]) {
        policyInside(previous, '203.0.113.9');
        const what = `${JSON.stringify(stored)} after a request checked against ${previous[0]}`;
        assert.equal(policyInside([stored], '203.0.113.9'), false, `${what}: 203.0.113.9`);
        assert.equal(
          policyInside([stored], '10.0.0.1'),
          insideRanges([stored], '10.0.0.1'),
          `${what}: 10.0.0.1`,
        );
      }
  });

  it('reads an object of ranges as the policy does, by its values: an unreadable one is no range there either', () => {
    policyInside(['0.0.0.0/0'], '203.0.113.9');
    assert.equal(policyInside({ a: '10.0.0.0/8 ' }, '203.0.113.9'), false, 'after a /0');
    assert.equal(policyInside({ a: '10.0.0.0/8' }, '10.0.0.1'), true);
    assert.deepEqual(
      inputForPolicy({
        tenant: { id: 't1', tuples: { x: { caveat: { ip_ranges: ['10.0.0.0/8 '] } } } },
        subject: { id: 'c', tuples: { y: { caveat: { ip_ranges: { z: '::/0x' } } } } },
      }),
      {
        tenant: { id: 't1', tuples: [{ caveat: { ip_ranges: [unreadableRange] } }] },
        subject: { id: 'c', tuples: [{ caveat: { ip_ranges: [unreadableRange] } }] },
      },
      'tuples given as an object are read by their values',
    );
  });

  it('reads a remembered list again once it is changed in place', () => {
    const list = ['10.0.0.0/8'];
    assert.equal(policyInside(list, '203.0.113.9'), false);
    list[0] = '10.0.0.0/8 ';
    policyInside(['0.0.0.0/0'], '203.0.113.9');
    assert.equal(
      policyInside(list, '203.0.113.9'),
      false,
      'an unreadable entry put into a clean list, after a /0',
    );
    list[0] = '10.0.0.0/8';
    assert.equal(policyInside(list, '10.0.0.1'), true, 'the entry mended in place');
  });

  it('every evaluation is given unreadable ranges as no range: tenant settings and both kinds of tuples', () => {
    const clean = {
      tenant: {
        id: 't1',
        security: { allowed_ip_ranges: ['10.0.0.0/8'] },
        tuples: [{ caveat: { ip_ranges: ['::/0'] } }],
      },
      subject: {
        id: 'c',
        tuples: [{ relation: 'payer', caveat: { ip_ranges: ['192.0.2.0/24'] } }, { caveat: {} }],
      },
    };
    assert.equal(inputForPolicy(clean), clean, 'a document with nothing to replace is answered as it is');
    const stored = {
      tenant: {
        id: 't1',
        security: { allowed_ip_ranges: ['10.0.0.0/8 ', '10.0.0.0/8'], mfa: true },
        tuples: [{ caveat: { ip_ranges: ['::/0x'] } }],
      },
      subject: {
        id: 'c',
        tuples: [{ relation: 'payer', caveat: { ip_ranges: ['192.0.2.0/24', 7] } }, { caveat: {} }],
      },
    };
    assert.deepEqual(inputForPolicy(stored), {
      tenant: {
        id: 't1',
        security: { allowed_ip_ranges: [unreadableRange, '10.0.0.0/8'], mfa: true },
        tuples: [{ caveat: { ip_ranges: [unreadableRange] } }],
      },
      subject: {
        id: 'c',
        tuples: [
          { relation: 'payer', caveat: { ip_ranges: ['192.0.2.0/24', unreadableRange] } },
          { caveat: {} },
        ],
      },
    });
    assert.equal(
      stored.tenant.security.allowed_ip_ranges[0],
      '10.0.0.0/8 ',
      "the caller's document is not changed",
    );
    for (const odd of [null, 'x', [], { tenant: 'x' }, { subject: { tuples: 'x' } }])
      assert.equal(inputForPolicy(odd), odd);
  });

  it('holds nothing for a range whose prefix the policy reads as undefined, and no write path takes one', () => {
    for (const r of undefinedInPolicy) {
      assert.equal(insideRanges([r], '10.0.0.1'), false, r);
      assert.equal(insideRanges([r], 'fe80::1'), false, r);
      assert.equal(readRange(r), undefined, r);
      const parsed = parseCidr(r);
      assert.ok(
        parsed === undefined || readRange(rangeText(parsed)),
        `${r}: refused, or stored as a clean range`,
      );
    }
  });

  it('is inside when any range holds the caller; bad entries beside good ones do not matter', () => {
    const ranges = ['nonsense', '::/0', '10.0.0.0/8'];
    assert.equal(insideRanges(ranges, '10.2.3.4'), true);
    assert.equal(policyInside(ranges, '10.2.3.4'), true);
    assert.equal(insideRanges(['nonsense', '::/0'], '10.2.3.4'), false);
    assert.equal(policyInside(['nonsense', '::/0'], '10.2.3.4'), false);
  });

  it('an empty list restricts nothing; a list with no address given allows nothing', () => {
    assert.equal(addressAllowed([], '10.0.0.1'), true);
    assert.equal(addressAllowed([], undefined), true);
    assert.equal(addressAllowed(['::/0'], undefined), false);
    assert.equal(addressAllowed(['::/0'], '127.0.0.1'), false);
    assert.equal(addressAllowed(['127.0.0.0/8'], '127.0.0.1'), true);
  });

  it('never throws, whatever it is given', () => {
    const odd = [
      '',
      '/',
      '//',
      '::/',
      '/0',
      '1.2.3.4/-1',
      '1.2.3.4/+8',
      ':::/0',
      '1::2::3/64',
      '\u0000',
      'a'.repeat(5000),
    ];
    for (const r of odd) for (const ip of odd) assert.equal(insideRanges([r], ip), false, `${r} ${ip}`);
    assert.equal(insideRanges([null, 7] as unknown as string[], '10.0.0.1'), false);
  });

  it('parses the inputs that are stored as address/prefix, and refuses what the policy cannot read', () => {
    assert.deepEqual(parseCidr('10.0.0.0/8'), { address: '10.0.0.0', prefix: 8, family: 'ipv4' });
    assert.deepEqual(parseCidr('::ffff:10.0.0.0/104'), {
      address: '::ffff:10.0.0.0',
      prefix: 104,
      family: 'ipv6',
    });
    const bare = parseCidr(' 10.0.0.1 ');
    assert.deepEqual(bare, { address: '10.0.0.1', prefix: 32, family: 'ipv4' });
    assert.equal(bare && rangeText(bare), '10.0.0.1/32', 'stored as a range the policy reads');
    for (const bad of [
      '10.0.0.0/8/8',
      'fe80::%eth0/64',
      'fe80::/64%eth0',
      '10.0.0.0/-1',
      '10.0.0.0/1e1',
      '10.0.0.0/33',
    ])
      assert.equal(parseCidr(bad), undefined, bad);
    // A range kept as it was written (allowed_ip_ranges) is one only when the policy reads it.
    assert.deepEqual(readRange('2001:db8::/32'), { address: '2001:db8::', prefix: 32, family: 'ipv6' });
    for (const bad of [' 10.0.0.0/8', '10.0.0.0/8 ', '10.0.0.1', '::1'])
      assert.equal(readRange(bad), undefined, bad);
  });
});
