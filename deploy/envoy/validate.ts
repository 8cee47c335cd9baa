/**
 * Strict validation of an Envoy bootstrap config (YAML or JSON) against Envoy's own protos,
 * as shipped by `@grpc/grpc-js-xds`: every key must be a field of its message, every value
 * of the field's type, every `typed_config` `@type` a message Envoy's API defines, and at
 * most one member of each oneof set. Run: `npx tsx deploy/envoy/validate.ts [file]`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { parse as parseYaml } from 'yaml';
import { envoyProtoIncludeDirs } from '../../edge/proto.ts';

/** The bootstrap and every extension this project's config may name in a typed_config. */
const protoFiles = [
  'envoy/config/bootstrap/v3/bootstrap.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/ext_authz/v3/ext_authz.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
  'envoy/extensions/access_loggers/stream/v3/stream.proto',
  'envoy/extensions/access_loggers/file/v3/file.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
];

let rootCache: protobuf.Root | undefined;

function envoyRoot(): protobuf.Root {
  if (rootCache) return rootCache;
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    for (const dir of envoyProtoIncludeDirs) {
      const full = join(dir, target);
      if (existsSync(full)) return full;
    }
    return target;
  };
  root.loadSync(protoFiles, { keepCase: true });
  root.resolveAll();
  rootCache = root;
  return root;
}

const typeUrlPrefix = 'type.googleapis.com/';
const durationPattern = /^-?\d+(\.\d{1,9})?s$/;
const wrapperScalar: Record<string, string> = {
  'google.protobuf.BoolValue': 'bool',
  'google.protobuf.StringValue': 'string',
  'google.protobuf.BytesValue': 'bytes',
  'google.protobuf.UInt32Value': 'uint32',
  'google.protobuf.Int32Value': 'int32',
  'google.protobuf.UInt64Value': 'uint64',
  'google.protobuf.Int64Value': 'int64',
  'google.protobuf.DoubleValue': 'double',
  'google.protobuf.FloatValue': 'float',
};

function camel(name: string): string {
  return name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function fullName(t: protobuf.ReflectionObject): string {
  return t.fullName.replace(/^\./, '');
}

class Validator {
  readonly errors: string[] = [];
  constructor(private readonly root: protobuf.Root) {}

  scalar(kind: string, v: unknown, path: string): void {
    const fail = () => this.errors.push(`${path}: expected ${kind}, got ${JSON.stringify(v)}`);
    switch (kind) {
      case 'string':
        if (typeof v !== 'string') fail();
        return;
      case 'bytes':
        if (typeof v !== 'string') fail();
        return;
      case 'bool':
        if (typeof v !== 'boolean') fail();
        return;
      case 'double':
      case 'float':
        if (
          typeof v !== 'number' &&
          !(typeof v === 'string' && /^(-?\d+(\.\d+)?([eE][-+]?\d+)?|NaN|-?Infinity)$/.test(v))
        )
          fail();
        return;
      default: {
        const unsigned = kind.startsWith('u') || kind.startsWith('fixed');
        const ok =
          (typeof v === 'number' && Number.isInteger(v)) || (typeof v === 'string' && /^-?\d+$/.test(v));
        if (!ok || (unsigned && Number(v) < 0)) fail();
      }
    }
  }

  value(field: protobuf.Field, v: unknown, path: string): void {
    const resolved = field.resolvedType;
    if (resolved instanceof protobuf.Enum) {
      const ok =
        (typeof v === 'string' && v in resolved.values) ||
        (typeof v === 'number' && Object.values(resolved.values).includes(v));
      if (!ok) this.errors.push(`${path}: ${JSON.stringify(v)} is not a value of ${fullName(resolved)}`);
      return;
    }
    if (resolved instanceof protobuf.Type) return this.message(resolved, v, path);
    this.scalar(field.type, v, path);
  }

  /** Well-known types have their own JSON forms (proto3 JSON mapping). */
  message(type: protobuf.Type, v: unknown, path: string): void {
    const name = fullName(type);
    const wrapped = wrapperScalar[name];
    if (wrapped) return this.scalar(wrapped, v, path);
    switch (name) {
      case 'google.protobuf.Duration':
        if (typeof v !== 'string' || !durationPattern.test(v))
          this.errors.push(`${path}: expected a duration like "0.1s", got ${JSON.stringify(v)}`);
        return;
      case 'google.protobuf.Timestamp':
      case 'google.protobuf.FieldMask':
        if (typeof v !== 'string') this.errors.push(`${path}: expected a string`);
        return;
      case 'google.protobuf.Struct':
        if (!isObject(v)) this.errors.push(`${path}: expected an object`);
        return;
      case 'google.protobuf.Value':
      case 'google.protobuf.ListValue':
        return;
      case 'google.protobuf.Any':
        return this.any(v, path);
      default:
    }
    if (!isObject(v)) {
      this.errors.push(`${path}: expected an object for ${name}, got ${JSON.stringify(v)}`);
      return;
    }
    const byJson = new Map<string, protobuf.Field>();
    for (const f of type.fieldsArray) {
      byJson.set(f.name, f);
      byJson.set(camel(f.name), f);
    }
    const oneofSeen = new Map<string, string>();
    for (const [key, child] of Object.entries(v)) {
      const field = byJson.get(key);
      const here = `${path}.${key}`;
      if (!field) {
        this.errors.push(`${here}: unknown field of ${name}`);
        continue;
      }
      if (field.partOf) {
        const other = oneofSeen.get(field.partOf.name);
        if (other) this.errors.push(`${here}: oneof ${field.partOf.name} already set by ${other}`);
        oneofSeen.set(field.partOf.name, key);
      }
      field.resolve();
      if (field instanceof protobuf.MapField) {
        if (!isObject(child)) this.errors.push(`${here}: expected a map`);
        else for (const [k, item] of Object.entries(child)) this.value(field, item, `${here}[${k}]`);
      } else if (field.repeated) {
        if (!Array.isArray(child)) this.errors.push(`${here}: expected a list`);
        else child.forEach((item, i) => this.value(field, item, `${here}[${i}]`));
      } else {
        this.value(field, child, here);
      }
    }
  }

  any(v: unknown, path: string): void {
    if (!isObject(v) || typeof v['@type'] !== 'string') {
      this.errors.push(`${path}: expected an object with "@type"`);
      return;
    }
    const url = v['@type'];
    if (!url.startsWith(typeUrlPrefix)) {
      this.errors.push(`${path}.@type: ${url} does not start with ${typeUrlPrefix}`);
      return;
    }
    let type: protobuf.Type;
    try {
      type = this.root.lookupType(url.slice(typeUrlPrefix.length));
    } catch {
      this.errors.push(`${path}.@type: ${url} is not a message of Envoy's API`);
      return;
    }
    const { '@type': _, ...rest } = v;
    const special = fullName(type).startsWith('google.protobuf.');
    this.message(type, special && 'value' in rest ? rest.value : rest, path);
  }
}

/** Validate a parsed config object; returns every problem found (empty when valid). */
export function validateBootstrap(config: unknown): string[] {
  const root = envoyRoot();
  const v = new Validator(root);
  v.message(root.lookupType('envoy.config.bootstrap.v3.Bootstrap'), config, '$');
  return v.errors;
}

export function validateBootstrapYaml(text: string): string[] {
  return validateBootstrap(parseYaml(text) as unknown);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const file = process.argv[2] ?? fileURLToPath(new URL('./envoy.yaml', import.meta.url));
  const errors = validateBootstrapYaml(readFileSync(file, 'utf8'));
  for (const e of errors) process.stderr.write(`${e}\n`);
  process.stdout.write(errors.length === 0 ? `${file}: valid\n` : `${file}: ${errors.length} problem(s)\n`);
  process.exit(errors.length === 0 ? 0 : 1);
}
