/**
 * A core started while PostgreSQL accepts and authenticates connections but then answers nothing
 * (a peer gone behind a network that drops its packets): each start-up attempt past its deadline
 * is abandoned, and its connection must go with it. Kept, every attempt (one per 10.5 s) held one
 * more connection for ever, until the pool was all abandoned attempts and the core could never
 * start, even once the database answered again. And a core waiting so stops at once on SIGTERM.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';
import { productionEnv, runService, until, untilServing, type Service } from '../helpers/services.ts';

// Each test has its own relay and core, and waits out production timeouts: they run side by side.
describe('a core started while PostgreSQL answers nothing', { concurrency: true }, () => {
  let tdb: TestDb;
  const relay = new Relay();
  const procs: Record<string, Service> = {};

  before(async () => {
    tdb = await freshDatabase();
  });
  after(async () => {
    for (const p of Object.values(procs)) p.child.kill('SIGKILL');
    await Promise.all(Object.values(procs).map((p) => p.exited));
    await relay.stop();
    await tdb.drop();
  });

  it('lets go of the connection of each abandoned attempt, and is ready once PostgreSQL answers', async () => {
    relay.silenceAtFirstQuery = true;
    const env = productionEnv(await throughRelay(relay, tdb.url));
    const port = await freePort();
    const core = runService('core', { ...env, CORE_PORT: String(port) });
    procs.core = core;
    await until(
      async () => (core.child.exitCode !== null || relay.silentCount() >= 1 ? true : undefined),
      30_000,
      () => `a first silenced start-up query\n${core.output()}`,
    );
    // Three attempts at least (each given up at its query timeout or deadline, 0.5 s apart) meet the silence.
    await until(
      async () => (core.child.exitCode !== null || relay.silentCount() >= 3 ? true : undefined),
      60_000,
      () => `three silenced start-up attempts (${relay.silentCount()} so far)\n${core.output()}`,
    );
    // The third attempt's connection has had its query timeout to be let go of.
    await new Promise((r) => setTimeout(r, 6_000));
    assert.equal(core.child.exitCode, null, core.output());
    assert.match(core.output(), /core not ready: waiting for the database/);
    assert.ok(relay.silentCount() >= 3, `attempts silenced: ${relay.silentCount()}`);
    assert.ok(
      relay.silentHeldByEdge() <= 1,
      `silenced connections core still holds: ${relay.silentHeldByEdge()} of ${relay.silentCount()}`,
    );

    relay.silenceAtFirstQuery = false;
    await untilServing(`http://127.0.0.1:${port}`, '/v1/ready', 60_000, procs, core);
  });

  it('exits at once, with code 0, on SIGTERM while it waits', async () => {
    const refusing = new Relay();
    refusing.refuse = true;
    const env = productionEnv(await throughRelay(refusing, tdb.url));
    const core = runService('core', { ...env, CORE_PORT: String(await freePort()) });
    procs.waiting = core;
    try {
      await until(
        async () => (core.child.exitCode !== null || /core not ready/.test(core.output()) ? true : undefined),
        30_000,
        () => `the core's warning\n${core.output()}`,
      );
      const sent = Date.now();
      core.child.kill('SIGTERM');
      const code = await core.exited;
      assert.ok(Date.now() - sent < 5_000, 'promptly');
      assert.equal(code, 0, `exit code ${code} (signal ${core.child.signalCode})\n${core.output()}`);
    } finally {
      await refusing.stop();
    }
  });
});
