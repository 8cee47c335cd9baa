/**
 * The end-to-end stack with the gateway's mutual-TLS listener (deploy/envoy/envoy.yaml
 * `machine_mtls`): its front door trusts two throw-away CAs, `pki`'s and `foreignPki`'s (the way
 * Envoy trusts every CA some tenant trusts), so a tenant listing only one of them in
 * `mtls_trusted_cas` can be shown a certificate the front door accepts and it does not.
 */
import { Agent } from 'undici';
import { startE2eStack, type E2eStack } from './e2e-stack.ts';
import { makePki, type Issued, type Pki } from './pki.ts';

export interface MtlsStack {
  e2e: E2eStack;
  /** The mutual-TLS listener's origin. */
  gwTls: string;
  pki: Pki;
  foreignPki: Pki;
  /** A connection pool to `gwTls` presenting `cert` (closed by `stop`). */
  agent(cert: Issued): Agent;
  stop(): Promise<void>;
}

export async function startMtlsStack(name: string): Promise<MtlsStack> {
  const pki = await makePki();
  const foreignPki = await makePki();
  const agents: Agent[] = [];
  let e2e: E2eStack | undefined;
  const stop = async () => {
    for (const a of agents) await a.close();
    await e2e?.stop();
    await pki.dispose();
    await foreignPki.dispose();
  };
  try {
    e2e = await startE2eStack(name, {
      gatewayTls: {
        key: pki.server.key,
        cert: pki.server.cert,
        clientCa: `${pki.ca.cert}\n${foreignPki.ca.cert}`,
      },
    });
  } catch (err) {
    await stop();
    throw err;
  }
  const agent = (cert: Issued) => {
    const a = new Agent({
      connect: { ca: pki.ca.cert, key: cert.key, cert: cert.cert, servername: '127.0.0.1' },
    });
    agents.push(a);
    return a;
  };
  return { e2e, gwTls: `https://127.0.0.1:${e2e.stack.ports.gatewayTls}`, pki, foreignPki, agent, stop };
}
