/** A core service on a fresh migrated database, listening on 127.0.0.1:0. */
import { randomBytes } from 'node:crypto';
import { KeyStore } from '../../core/keys/keys.ts';
import { buildCore, type Core } from '../../core/app.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from './db.ts';
import { serve } from './http.ts';
import { testEdgeSecrets } from './edge-auth.ts';
import { edgeRouteAccess } from '../../bin/docs.ts';

export interface TestCore {
  origin: string;
  core: Core;
  tdb: TestDb;
  keys: KeyStore;
  /** The master key `keys` opens private keys with (a second store with another clock signs too). */
  master: Buffer;
  close(): Promise<void>;
}

export async function startTestCore(): Promise<TestCore> {
  const metrics = createMetrics();
  const tdb = await freshDatabase({ metrics });
  const master = randomBytes(32);
  const keys = new KeyStore(tdb.db, master);
  const core = buildCore({
    db: tdb.db,
    log: createLogger('silent'),
    metrics,
    build: readBuildInfo(),
    keys,
    edgeSecrets: testEdgeSecrets,
    checkResponses: true,
    routeAccess: edgeRouteAccess(),
  });
  const s = await serve(core.server);
  return {
    origin: s.origin,
    core,
    tdb,
    keys,
    master,
    async close() {
      await s.close();
      await tdb.drop();
    },
  };
}
