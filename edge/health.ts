/**
 * The standard gRPC health protocol on the edge's port (`grpc.health.v1.Health`): SERVING while
 * the edge can decide (a verified policy revision is loaded, its cached state is within the
 * staleness bound, and it is not shutting down), NOT_SERVING otherwise, so Envoy and Kubernetes
 * stop sending Checks to an edge that would only deny. Services: "" (the process) and
 * `envoy.service.auth.v3.Authorization`; any other name is NOT_FOUND (Check) or SERVICE_UNKNOWN
 * (Watch), as the protocol says.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const protoFile = fileURLToPath(new URL('../proto/grpc/health/v1/health.proto', import.meta.url));
export const servedServices = new Set(['', 'envoy.service.auth.v3.Authorization']);
/** How often a Watch stream re-evaluates the status (it only sends changes). */
const watchIntervalMs = 1000;

export const ServingStatus = { SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;

let cached: grpc.ServiceClientConstructor | undefined;

/** The `grpc.health.v1.Health` service constructor (for servers and clients). */
export function healthService(): grpc.ServiceClientConstructor {
  if (!cached) {
    const pkg = grpc.loadPackageDefinition(
      protoLoader.loadSync(protoFile, { keepCase: true, enums: Number, defaults: true }),
    );
    cached = (((pkg.grpc as grpc.GrpcObject).health as grpc.GrpcObject).v1 as grpc.GrpcObject)
      .Health as grpc.ServiceClientConstructor;
  }
  return cached;
}

type Request = { service?: string };
type Response = { status: number };

/** Add the Health service to `server`; `serving()` is asked on every Check and Watch tick. */
export function addHealthService(server: grpc.Server, serving: () => boolean): void {
  const status = (service: string): number =>
    !servedServices.has(service)
      ? ServingStatus.SERVICE_UNKNOWN
      : serving()
        ? ServingStatus.SERVING
        : ServingStatus.NOT_SERVING;
  server.addService(healthService().service, {
    Check: (call: grpc.ServerUnaryCall<Request, Response>, callback: grpc.sendUnaryData<Response>) => {
      const s = status(call.request.service ?? '');
      if (s === ServingStatus.SERVICE_UNKNOWN)
        return callback({ code: grpc.status.NOT_FOUND, details: 'unknown service' });
      callback(null, { status: s });
    },
    Watch: (call: grpc.ServerWritableStream<Request, Response>) => {
      let last = -1;
      const tick = () => {
        const s = status(call.request.service ?? '');
        if (s !== last) call.write({ status: s });
        last = s;
      };
      tick();
      const timer = setInterval(tick, watchIntervalMs);
      timer.unref();
      call.on('cancelled', () => clearInterval(timer));
      call.on('close', () => clearInterval(timer));
    },
  });
}
