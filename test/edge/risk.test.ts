import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RiskEngine, velocityLimit, velocityWindowMs } from '../../edge/auth/risk.ts';
import type { SessionState } from '../../edge/state/store.ts';

const session = (over: Partial<SessionState> = {}): SessionState => ({
  id: 's1',
  tenantId: 't1',
  subjectType: 'customer',
  subjectId: 'c1',
  aal: 1,
  device: 'dev-1',
  ip: '10.1.2.3',
  lastSeenMs: 0,
  revoked: false,
  ...over,
});

/** The risk of a request from `ip` in a session begun at `began` (same device, no money moved). */
const from = (began: string, ip: string) =>
  new RiskEngine(() => 0).assess({
    session: session({ ip: began }),
    deviceId: 'dev-1',
    ip,
    subject: 'c1',
    moneyMoving: false,
  }).risk;

describe('risk signal', () => {
  it('is high for a device other than the one the session signed in with', () => {
    const risk = new RiskEngine(() => 0);
    assert.deepEqual(
      risk.assess({
        session: session(),
        deviceId: 'dev-2',
        ip: '10.1.2.3',
        subject: 'c1',
        moneyMoving: false,
      }),
      { risk: 'high', signals: ['new_device'] },
    );
    assert.deepEqual(
      risk.assess({
        session: session({ subjectType: 'agent' }),
        deviceId: undefined,
        ip: '10.1.2.3',
        subject: 'a1',
        moneyMoving: false,
      }),
      { risk: 'high', signals: ['device_missing'] },
      'a device-bound agent session without the header',
    );
    assert.deepEqual(
      risk.assess({
        session: session({ subjectType: 'agent' }),
        deviceId: 'dev-2',
        ip: '10.1.2.3',
        subject: 'a1',
        moneyMoving: false,
      }),
      { risk: 'high', signals: ['new_device'] },
    );
    assert.equal(
      risk.assess({
        session: session({ subjectType: 'agent' }),
        deviceId: 'dev-1',
        ip: '10.1.2.3',
        subject: 'a1',
        moneyMoving: false,
      }).risk,
      'low',
    );
    assert.equal(
      risk.assess({
        session: session(),
        deviceId: 'dev-1',
        ip: '10.1.2.3',
        subject: 'c1',
        moneyMoving: false,
      }).risk,
      'low',
    );
    assert.deepEqual(
      risk.assess({
        session: session(),
        deviceId: undefined,
        ip: '10.1.2.3',
        subject: 'c1',
        moneyMoving: false,
      }),
      { risk: 'high', signals: ['device_missing'] },
      'leaving the header out is no way around it',
    );
    assert.equal(
      risk.assess({
        session: session({ device: null }),
        deviceId: undefined,
        ip: '10.1.2.3',
        subject: 'c1',
        moneyMoving: false,
      }).risk,
      'low',
      'a session without a device',
    );
  });

  it('is medium outside the /16 the session began in, low inside it', () => {
    const risk = new RiskEngine(() => 0);
    assert.deepEqual(
      risk.assess({
        session: session(),
        deviceId: 'dev-1',
        ip: '10.9.0.1',
        subject: 'c1',
        moneyMoving: false,
      }),
      { risk: 'medium', signals: ['ip_outside_usual_range'] },
    );
    assert.equal(
      risk.assess({
        session: session(),
        deviceId: 'dev-1',
        ip: '10.1.200.7',
        subject: 'c1',
        moneyMoving: false,
      }).risk,
      'low',
    );
  });

  it('reads IPv6 by its groups: the same /48 however the addresses are written, another /48 medium', () => {
    assert.equal(from('2001:db8::5', '2001:db8:0:1::5'), 'low', 'a compressed and a longer text of one /48');
    assert.equal(from('2001:DB8::5', '2001:0db8:0000:ffff::1'), 'low', 'case and leading zeros');
    assert.equal(from('2001:db8::5', '2001:db8:1::5'), 'medium');
    assert.equal(from('2001:db8::5', '2001:db9::5'), 'medium');
  });

  it('reads the IPv4 network inside NAT64 (64:ff9b::/96) and hex IPv4-mapped addresses: not one /48 for every IPv4 caller', () => {
    // RFC 6052: behind a NAT64/SIIT translator every IPv4 client arrives as 64:ff9b::a.b.c.d, all
    // in one /48, so a session begun on one IPv4 network moved to any other one unnoticed.
    assert.equal(from('64:ff9b::c000:201', '64:ff9b::cb00:7109'), 'medium', '192.0.2.1 then 203.0.113.9');
    assert.equal(from('64:ff9b::192.0.2.1', '64:ff9b::c000:3301'), 'low', 'one IPv4 /16 however written');
    assert.equal(from('192.0.2.1', '64:ff9b::c000:3301'), 'low', 'the same IPv4 /16 through the translator');
    // An IPv4-mapped address is one IPv4 address however it is written.
    assert.equal(from('::ffff:c000:201', '::ffff:cb00:7109'), 'medium', 'two IPv4 networks, hex-mapped');
    assert.equal(from('::ffff:192.0.2.1', '::ffff:c000:3301'), 'low', 'one /16, dotted and hex');
  });

  it('is high past the velocity limit of money intents in the window, and low again once they age out', () => {
    let now = 1_000_000;
    const risk = new RiskEngine(() => now);
    const intent = (subject = 'c1') =>
      risk.assess({ session: undefined, deviceId: undefined, ip: '10.1.2.3', subject, moneyMoving: true })
        .risk;
    for (let i = 0; i < velocityLimit; i++) {
      assert.equal(intent(), 'low', `intent ${i + 1} of ${velocityLimit}`);
      now += 1000;
    }
    assert.equal(intent(), 'high');
    assert.equal(intent('c2'), 'low', 'counted per subject');
    // Reads never count towards velocity.
    assert.equal(
      risk.assess({
        session: undefined,
        deviceId: undefined,
        ip: '10.1.2.3',
        subject: 'c3',
        moneyMoving: false,
      }).risk,
      'low',
    );
    now += velocityWindowMs;
    assert.equal(intent(), 'low');
  });

  it('stays exact for a subject sending thousands of intents: the oldest ones age out on time', () => {
    let now = 0;
    const risk = new RiskEngine(() => now);
    const intent = () =>
      risk.assess({
        session: undefined,
        deviceId: undefined,
        ip: '10.1.2.3',
        subject: 'c1',
        moneyMoving: true,
      }).risk;
    for (let i = 0; i < 5000; i++) {
      assert.equal(intent(), i < velocityLimit ? 'low' : 'high');
      now += 10;
    }
    // The last intent was at t = 49,990; ten more spaced past the window start a fresh count.
    now = 49_990 + velocityWindowMs;
    for (let i = 0; i < velocityLimit; i++) {
      assert.equal(intent(), 'low', `fresh intent ${i + 1}`);
      now += 1;
    }
    assert.equal(intent(), 'high');
  });
});
