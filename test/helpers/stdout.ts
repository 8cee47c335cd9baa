/**
 * What this process writes to its stdout (its log stream) while `run` runs, a worker thread's
 * console included (a worker's stdout is piped into it): still written, and returned as text.
 */
export async function stdoutDuring(run: () => Promise<void>): Promise<string> {
  const chunks: string[] = [];
  const write = process.stdout.write;
  process.stdout.write = function (this: NodeJS.WriteStream, chunk: unknown, ...rest: unknown[]) {
    chunks.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('utf8'));
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  } as typeof process.stdout.write;
  try {
    await run();
  } finally {
    process.stdout.write = write;
  }
  return chunks.join('');
}
