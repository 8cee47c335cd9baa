/**
 * Imports that fail on demand (a process out of file descriptors, a package replaced under a
 * running process), for code that loads a module lazily: test/helpers/import-failure-hooks.mjs.
 */
import { once } from 'node:events';
import { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';

export interface ImportFailures {
  /** Fail every later import of these specifiers (none: `[]`); resolves once the hooks have it. */
  fail(specifiers: string[]): Promise<void>;
  close(): void;
}

export function importFailures(): ImportFailures {
  const { port1, port2 } = new MessageChannel();
  register('./import-failure-hooks.mjs', import.meta.url, { data: { port: port2 }, transferList: [port2] });
  return {
    async fail(specifiers) {
      port1.postMessage(specifiers);
      await once(port1, 'message');
    },
    close: () => port1.close(),
  };
}
