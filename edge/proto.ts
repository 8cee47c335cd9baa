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
  longs: String,
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
