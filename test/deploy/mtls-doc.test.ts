/**
 * The mutual-TLS clusters documented in deploy/README.md ("Trust between the tiers") are a
 * valid Envoy configuration: dropped into envoy.yaml in place of its clusters, the bootstrap
 * still validates strictly against Envoy's protos, and both hops present a client certificate.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { validateBootstrap } from '../../deploy/envoy/validate.ts';

type Obj = Record<string, any>;
const readme = readFileSync(new URL('../../deploy/README.md', import.meta.url), 'utf8');
const envoy = readFileSync(new URL('../../deploy/envoy/envoy.yaml', import.meta.url), 'utf8');

function documentedClusters(): Obj[] {
  const block = /```yaml\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(block, 'deploy/README.md has a yaml block');
  return (parse(block) as { clusters: Obj[] }).clusters;
}

describe('deploy/README.md mutual TLS clusters', () => {
  it('validate as envoy.yaml clusters and keep the edge_authz and core names', () => {
    const config = parse(envoy) as Obj;
    const clusters = documentedClusters();
    assert.deepEqual(
      clusters.filter((c) => c.name !== 'envoy_admin').map((c) => c.name),
      ['edge_authz', 'core'],
    );
    assert.deepEqual(
      clusters.map((c) => c.name),
      config.static_resources.clusters.map((c: Obj) => c.name),
    );
    config.static_resources.clusters = clusters;
    assert.deepEqual(validateBootstrap(config), []);
  });

  it("present Envoy's client certificate to both clusters and verify each server against the internal CA", () => {
    // envoy_admin is Envoy's own loopback admin (the kubelet's readiness route): no TLS hop.
    for (const c of documentedClusters().filter((x) => x.name !== 'envoy_admin')) {
      const tls = c.transport_socket.typed_config;
      assert.match(tls['@type'], /UpstreamTlsContext$/);
      assert.equal(tls.common_tls_context.tls_certificates.length, 1, c.name);
      assert.ok(tls.common_tls_context.validation_context.trusted_ca.filename, c.name);
      assert.equal(tls.common_tls_context.validation_context.match_typed_subject_alt_names.length, 1, c.name);
    }
  });

  it('would catch a misspelt field in the documented TLS context', () => {
    const config = parse(envoy) as Obj;
    const clusters = documentedClusters();
    (clusters[1] as Obj).transport_socket.typed_config.common_tls_context.tls_certificate = [];
    config.static_resources.clusters = clusters;
    assert.match(validateBootstrap(config).join('\n'), /tls_certificate: unknown field/);
  });
});
