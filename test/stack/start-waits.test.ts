/**
 * The separately deployed core and edge, started while PostgreSQL refuses connections (a database
 * still starting, a failover, a machine too loaded to accept in time), wait for it: each says at
 * warn what it waits for, and is ready once the database accepts. Both used to exit on the first
 * refused connect, never to be ready. And a wait for a process's readiness ends as soon as that
 * process has exited, saying how and with its output, instead of running out its time.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';
import {
  edgeEnv,
  productionEnv,
  runService,
  until,
  untilServing,
  type Service,
} from '../helpers/services.ts';

describe('services started before PostgreSQL accepts connections', () => {
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

  it('a core and an edge say what they wait for, and are ready once PostgreSQL accepts', async () => {
    relay.refuse = true;
    const env = productionEnv(await throughRelay(relay, tdb.url));
    const ports = { core: await freePort(), authz: await freePort(), metrics: await freePort() };
    procs.core = runService('core', { ...env, CORE_PORT: String(ports.core) });
    procs.edge = runService('edge', {
      ...edgeEnv(env),
      AUTHZ_PORT: String(ports.authz),
      EDGE_METRICS_PORT: String(ports.metrics),
    });
    const { core, edge } = procs;
    assert.ok(core && edge);
    // Runs' default log level is warn: what each waits for is said there, while it waits.
    const exited = () => core.child.exitCode !== null || edge.child.exitCode !== null;
    const said = () =>
      /core not ready: waiting for the database/.test(core.output()) &&
      /edge not ready: waiting for database listener/.test(edge.output());
    await until(
      async () => (exited() || said() ? true : undefined),
      60_000,
      () => `the warnings (--- core\n${core.output()}\n--- edge\n${edge.output()})`,
    );
    assert.equal(core.child.exitCode, null, core.output());
    assert.equal(edge.child.exitCode, null, edge.output());

    relay.refuse = false;
    await Promise.all([
      untilServing(`http://127.0.0.1:${ports.core}`, '/v1/ready', 60_000, procs, core),
      untilServing(`http://127.0.0.1:${ports.metrics}`, '/ready', 60_000, procs, edge),
    ]);
    assert.doesNotMatch(
      core.output() + edge.output(),
      /postgres(ql)?:\/\/[^\s"]*:[^\s"]*@/,
      'no URL with a password',
    );
  });

  it('a wait for readiness ends when the process has exited, and says how, with its output', async () => {
    // No configuration: the edge exits 2 at once, listing what is missing.
    const edge = runService('edge', { MODE: 'production' });
    const started = Date.now();
    await assert.rejects(
      untilServing(`http://127.0.0.1:${await freePort()}`, '/ready', 60_000, { edge }, edge),
      (err: Error) => {
        assert.match(
          err.message,
          /the edge serving http:\/\/127\.0\.0\.1:\d+\/ready exited before it was ready/,
        );
        assert.match(err.message, /--- edge \(exited with code 2\)/);
        assert.match(err.message, /invalid configuration/);
        assert.match(err.message, /\/ready last answered: no answer: /);
        return true;
      },
    );
    assert.ok(Date.now() - started < 30_000, 'well before the wait ran out');
  });
});
