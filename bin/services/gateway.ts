/**
 * `npm run gateway`: the development gateway in front of N edges and N cores
 * (AUTHZ_ADDRESSES, CORE_ORIGINS), for development and tests; production runs Envoy
 * (deploy/envoy/envoy.yaml). SIGTERM: stop accepting, finish requests in flight.
 */
import { createGateway } from '../../edge/gateway.ts';
import { listen } from '../../shared/net.ts';
import { listOf } from '../service-config.ts';
import { configOrExit, fail, loggerOf, onShutdown } from './common.ts';

async function main(): Promise<void> {
  const config = configOrExit('gateway');
  const log = loggerOf(config, 'gateway');
  if (config.mode === 'production')
    log.warn(
      'the dev gateway is a development and test tool: production runs Envoy (deploy/envoy/envoy.yaml)',
    );
  const gateway = createGateway({
    log,
    authzAddress: listOf(config, 'AUTHZ_ADDRESSES'),
    coreOrigin: listOf(config, 'CORE_ORIGINS'),
  });
  await gateway
    .ready()
    .catch(() =>
      log.warn('no edge is reachable yet; requests are refused 503 authz_unavailable until one is'),
    );
  const port = await listen(gateway.server, Number(config.values.GATEWAY_PORT)).catch((err: unknown) =>
    fail(`cannot listen on GATEWAY_PORT ${config.values.GATEWAY_PORT}: ${(err as Error).message}`),
  );
  log.info(
    { port, edges: listOf(config, 'AUTHZ_ADDRESSES'), cores: listOf(config, 'CORE_ORIGINS') },
    'dev gateway is serving',
  );
  onShutdown(log, () => gateway.close());
}

main().catch((err: unknown) => fail(`gateway failed to start: ${(err as Error).message}`));
