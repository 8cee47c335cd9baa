// Module loader hooks for tests (test/helpers/import-failure.ts): while a specifier is listed,
// importing it fails as it does in a process out of file descriptors. Hooks run in a thread of
// their own: the list arrives over the port given at registration, and each change is answered.
let failing = new Set();

export async function initialize({ port }) {
  port.on('message', (list) => {
    failing = new Set(list);
    port.postMessage('ok');
  });
  port.unref();
}

export async function resolve(specifier, context, next) {
  if (failing.has(specifier))
    throw Object.assign(new Error(`EMFILE: too many open files, open '${specifier}'`), { code: 'EMFILE' });
  return next(specifier, context);
}
