/**
 * Envoy's ext_authz protos, loaded from the copy of Envoy's data-plane API that
 * `@grpc/grpc-js-xds` ships under `deps/` (no hand-copied .proto files).
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const depsDir = join(
  dirname(createRequire(import.meta.url).resolve('@grpc/grpc-js-xds/package.json')),
  'deps',
);

/** Include paths for Envoy's API and the protos it imports. */
export const envoyProtoIncludeDirs = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) =>
  join(depsDir, d),
);

export const loaderOptions: protoLoader.Options = {
  keepCase: true,
  // 64-bit fields (the request's `size`, timestamps' seconds) as numbers: exact far beyond any
  // body or date Envoy sends, and a string costs a Long's decimal formatting per Check (4-5 µs
  // of each transfer Check's main thread under the authz bench, issue 18 item 1). Nothing reads them.
  longs: Number,
  enums: Number,
  defaults: true,
  oneofs: true,
  includeDirs: envoyProtoIncludeDirs,
};

let cached: grpc.GrpcObject | undefined;

/** The `envoy.service.auth.v3` package with the Authorization service. */
export function authorizationPackage(): { Authorization: grpc.ServiceClientConstructor } {
  cached ??= grpc.loadPackageDefinition(
    protoLoader.loadSync('envoy/service/auth/v3/external_auth.proto', loaderOptions),
  );
  const envoy = cached.envoy as grpc.GrpcObject;
  const service = envoy.service as grpc.GrpcObject;
  const auth = service.auth as grpc.GrpcObject;
  const v3 = auth.v3 as grpc.GrpcObject;
  return { Authorization: v3.Authorization as grpc.ServiceClientConstructor };
}
