/**
 * A core route's reference to its declaration (issue 21 item 1; shared/routes/): spread into the
 * route (`...declared('GET', '/v1/countries')`), it gives the method and path the edge's table
 * and the registry know, the roles core checks again, and the money movement and error format
 * the edge declares. A route with no declaration is refused when the route list is built.
 */
import type { MoneyMovement } from '../../shared/api-key-budget.ts';
import type { ErrorFormat } from '../../shared/errors.ts';
import { declarationOf } from '../../shared/routes/index.ts';
import type { Method } from './route.ts';

export interface Declared {
  method: Method;
  path: string;
  /** Any one of these roles may call the route; empty where the declaration names none. */
  roles: readonly string[];
  movesMoney?: MoneyMovement;
  errorFormat?: ErrorFormat;
}

export function declared(method: Method, path: string): Declared {
  const d = declarationOf(method, path);
  return {
    method,
    path,
    roles: d.roles ?? [],
    ...(d.money ? { movesMoney: d.money } : {}),
    ...(d.errorFormat ? { errorFormat: d.errorFormat } : {}),
  };
}
