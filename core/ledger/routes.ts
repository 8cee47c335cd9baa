/** Every core ledger route, plus the ledger service behind the write routes. */
import type { Logger } from 'pino';
import type { Db } from '../../shared/db/pool.ts';
import type { RouteSpec } from '../http/route.ts';
import type { KeyStore } from '../keys/keys.ts';
import { accountRoutes } from './account-routes.ts';
import { holdRoutes } from './hold-routes.ts';
import { limitRoutes } from './limits.ts';
import { postingRoutes } from './posting-routes.ts';
import { productRoutes } from './products.ts';
import { Ledger } from './service.ts';
import { statementRoutes } from './statements.ts';

export { Ledger };

export function ledgerRoutes(deps: {
  db: Db;
  keys: KeyStore;
  log: Logger;
  now: () => number;
  ledger: Ledger;
}): RouteSpec[] {
  return [
    ...accountRoutes(deps),
    ...postingRoutes(deps),
    ...holdRoutes(deps),
    ...limitRoutes(deps),
    ...statementRoutes(deps),
    ...productRoutes(deps),
  ];
}
