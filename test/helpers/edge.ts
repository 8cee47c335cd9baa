/** A real ext_authz gRPC server and a client for it, both on loopback. */
import * as grpc from '@grpc/grpc-js';
import { authorizationPackage } from '../../edge/proto.ts';
import { buildRouteTable, type ResolveRoute } from '../../edge/routes.ts';
import { bindEdge, createEdgeServer, type Decide, type EdgeDeps } from '../../edge/server.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';

export interface TestEdge {
  address: string;
  check(req: CheckRequest, deadlineMs?: number): Promise<CheckResponse>;
  close(): Promise<void>;
}

/** A Check client for an ext_authz server at `address`. */
export function checkClient(address: string): {
  check(req: CheckRequest, deadlineMs?: number): Promise<CheckResponse>;
  close(): void;
} {
  const { Authorization } = authorizationPackage();
  const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    Check(
      r: CheckRequest,
      o: grpc.CallOptions,
      cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void,
    ): void;
  };
  return {
    check: (req, deadlineMs = 2000) =>
      new Promise((resolve, reject) =>
        client.Check(req, { deadline: Date.now() + deadlineMs }, (e, r) =>
          e || !r ? reject(e) : resolve(r),
        ),
      ),
    close: () => client.close(),
  };
}

/** The declarations' table, as the built bundle ships it (test/edge/routes.test.ts). */
export const declaredRouteTable: ResolveRoute = buildRouteTable(routeDeclarations);

export async function startTestEdge(
  deps: Omit<EdgeDeps, 'resolve'> & { resolve?: ResolveRoute },
): Promise<TestEdge> {
  const server = createEdgeServer({ ...deps, resolve: deps.resolve ?? declaredRouteTable });
  const port = await bindEdge(server, 0);
  const address = `127.0.0.1:${port}`;
  const client = checkClient(address);
  return {
    address,
    check: client.check,
    async close() {
      client.close();
      await new Promise<void>((r) => server.tryShutdown(() => r()));
    },
  };
}

/** A CheckRequest shaped as Envoy sends it (header map, path with query, raw_body bytes). */
export function envoyRequest(
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: string; ip?: string } = {},
): CheckRequest {
  const body = Buffer.from(opts.body ?? '');
  return {
    attributes: {
      source: { address: { socket_address: { address: opts.ip ?? '203.0.113.9', port_value: 50000 } } },
      request: {
        http: {
          id: 'req-1',
          method,
          path,
          host: 'api.example',
          scheme: 'https',
          protocol: 'HTTP/1.1',
          headers: {
            ':method': method,
            ':path': path,
            ':authority': 'api.example',
            'x-request-id': 'req-1',
            ...opts.headers,
          },
          size: String(body.length),
          raw_body: body,
        },
      },
    },
  };
}

export function headerOf(res: CheckResponse, key: string): string | undefined {
  const list = res.ok_response?.headers ?? res.denied_response?.headers ?? [];
  return list.find((h) => h.header.key === key)?.header.value;
}

/**
 * A stand-in decision for wire-level tests of the Check server and gateway: public
 * operational routes pass, everything else is denied (the real decision is edge/authz.ts).
 */
export const platformOnly: Decide = (view, resolved) => {
  if (resolved.route && resolved.route.credential === 'public' && resolved.purpose === 'operational') {
    return { allow: true, status: 200, set: { 'x-purpose': resolved.purpose } };
  }
  if (!resolved.route) {
    return {
      allow: false,
      status: 403,
      code: 'POLICY_DENIED',
      message: `no route mapping for ${view.method} ${view.path}; purpose operational denies it`,
    };
  }
  return {
    allow: false,
    status: 403,
    code: 'POLICY_DENIED',
    message: `purpose ${resolved.purpose} is not authorised here`,
  };
};
