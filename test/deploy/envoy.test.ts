import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { validateBootstrap } from '../../deploy/envoy/validate.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';

const text = readFileSync(new URL('../../deploy/envoy/envoy.yaml', import.meta.url), 'utf8');
type Obj = Record<string, any>;
const load = (): Obj => parse(text) as Obj;
const hcm = (c: Obj): Obj => c.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
const routesOf = (c: Obj): Obj[] => hcm(c).route_config.virtual_hosts[0].routes;
/** The ext_authz per-route config of route `i` (a thrown TypeError fails the test if absent). */
const perRoute = (c: Obj, i: number): Obj =>
  routesOf(c)[i]?.typed_per_filter_config['envoy.filters.http.ext_authz'];
const extAuthz = (c: Obj): Obj =>
  hcm(c).http_filters.find((f: Obj) => f.name === 'envoy.filters.http.ext_authz').typed_config;

describe('deploy/envoy/envoy.yaml', () => {
  it('validates strictly against envoy.config.bootstrap.v3.Bootstrap', () => {
    assert.deepEqual(validateBootstrap(load()), []);
  });

  it('has a machine-client listener that requires and validates client certificates and hands them to ext_authz (issue 17 item 4)', () => {
    const c = load();
    const machine = c.static_resources.listeners.find((l: Obj) => l.name === 'machine_mtls');
    const chain = machine.filter_chains[0];
    const tls = chain.transport_socket.typed_config;
    assert.equal(
      tls['@type'],
      'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext',
    );
    assert.equal(tls.require_client_certificate, true);
    assert.ok(tls.common_tls_context.validation_context.trusted_ca.filename);
    const mtlsAuthz = chain.filters[0].typed_config.http_filters.find(
      (f: Obj) => f.name === 'envoy.filters.http.ext_authz',
    ).typed_config;
    assert.equal(mtlsAuthz.include_peer_certificate, true);
    assert.equal(mtlsAuthz.failure_mode_allow, false);
    // The strict validator reads into the TLS context: a misspelt requirement is not silently ignored.
    tls.require_client_certificates = true;
    assert.match(validateBootstrap(c).join('\n'), /require_client_certificates: unknown field/);
  });

  it('fails closed within 100 ms and inspects at most 8192 body bytes', () => {
    const a = extAuthz(load());
    assert.equal(a.failure_mode_allow, false);
    assert.equal(a.grpc_service.timeout, '0.1s');
    assert.deepEqual(a.with_request_body, {
      max_request_bytes: 8192,
      allow_partial_message: false,
      pack_as_bytes: true,
    });
    const authz = load().static_resources.clusters.find((c: Obj) => c.name === 'edge_authz');
    assert.ok(
      authz.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']
        .explicit_http_config.http2_protocol_options,
    );
  });

  it('refuses an unknown field at the top level and inside a typed_config', () => {
    const top = load();
    top.bogus = 1;
    assert.match(validateBootstrap(top).join('\n'), /\$\.bogus: unknown field/);
    const nested = load();
    extAuthz(nested).failure_mode_allowed = false;
    assert.match(
      validateBootstrap(nested).join('\n'),
      /failure_mode_allowed: unknown field of envoy\.extensions\.filters\.http\.ext_authz\.v3\.ExtAuthz/,
    );
  });

  it('refuses a wrong @type in any typed_config', () => {
    const c = load();
    hcm(c).http_filters[1].typed_config['@type'] =
      'type.googleapis.com/envoy.extensions.filters.http.router.v3.Routerx';
    assert.match(validateBootstrap(c).join('\n'), /is not a message of Envoy's API/);
    const swapped = load();
    // A real type in the wrong place: the ext_authz fields are not fields of Router.
    extAuthz(swapped)['@type'] = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';
    assert.match(
      validateBootstrap(swapped).join('\n'),
      /unknown field of envoy\.extensions\.filters\.http\.router\.v3\.Router/,
    );
  });

  it('refuses wrong value types, bad enums, bad durations and two members of a oneof', () => {
    const c = load();
    extAuthz(c).with_request_body.max_request_bytes = 'lots';
    extAuthz(c).transport_api_version = 'V9';
    extAuthz(c).grpc_service.timeout = '100ms';
    extAuthz(c).http_service = { server_uri: { uri: 'http://x', cluster: 'x', timeout: '1s' } };
    const errors = validateBootstrap(c).join('\n');
    assert.match(errors, /max_request_bytes: expected uint32/);
    assert.match(errors, /"V9" is not a value of/);
    assert.match(errors, /timeout: expected a duration/);
    assert.match(errors, /oneof services already set by grpc_service/);
  });
  it('streams dispute attachments: exactly the routes the edge table marks get ExtAuthzPerRoute disable_request_body_buffering', () => {
    const c = load();
    const at = routesOf(c).findIndex((r: Obj) => r.typed_per_filter_config?.['envoy.filters.http.ext_authz']);
    assert.equal(
      routesOf(c).filter((r: Obj) => r.typed_per_filter_config?.['envoy.filters.http.ext_authz']).length,
      1,
    );
    const route: Obj = routesOf(c)[at] ?? {};
    const per = perRoute(c, at);
    assert.equal(
      per['@type'],
      'type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute',
    );
    assert.deepEqual(per.check_settings, { disable_request_body_buffering: true });
    assert.deepEqual(route.match.headers, [{ name: ':method', string_match: { exact: 'POST' } }]);
    // Envoy takes the first matching route: the streaming one must come before the catch-all.
    assert.ok(at < routesOf(c).findIndex((r: Obj) => r.match.prefix === '/'));
    const regex = new RegExp(route.match.safe_regex.regex);
    const sample = (template: string) =>
      template.replace(/\{[^}]+\}/g, '0190a1b2-0000-7000-8000-000000000001');
    const marked = routeDeclarations.filter((r) => r.disableRequestBodyBuffering);
    assert.deepEqual(marked.map((r) => `${r.method} ${r.template}`).sort(), [
      'POST /v1/disputes/{case_id}/attachments',
      'POST /v1/policy/candidates',
    ]);
    for (const r of marked) assert.match(sample(r.template), regex);
    for (const r of routeDeclarations.filter((x) => !x.disableRequestBodyBuffering && x.method === 'POST')) {
      assert.doesNotMatch(sample(r.template), regex, `${r.template} must stay buffered`);
    }
  });

  it('refuses a misspelt or misplaced per-route ext_authz setting', () => {
    const c = load();
    perRoute(c, 0).check_settings.disable_request_body_bufering = true;
    assert.match(
      validateBootstrap(c).join('\n'),
      /disable_request_body_bufering: unknown field of envoy\.extensions\.filters\.http\.ext_authz\.v3\.CheckSettings/,
    );
    const wrong = load();
    perRoute(wrong, 0)['@type'] = 'type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz';
    assert.match(
      validateBootstrap(wrong).join('\n'),
      /check_settings: unknown field of envoy\.extensions\.filters\.http\.ext_authz\.v3\.ExtAuthz/,
    );
  });
});
