/**
 * Reads of one value per key under way, each shared by every caller that asks meanwhile (a burst
 * of misses costs one query, not one each). A change announced while a read runs (`overtake`)
 * may postdate what it read: the read still answers those already waiting for it, but is not
 * kept. Used by the token verifier's key sets (shared/token-keys.ts) and the key store's signers
 * (core/keys/keys.ts).
 */
interface Read<T> {
  promise: Promise<T>;
  current: boolean;
}

export class SharedReads<T> {
  private readonly reads = new Map<string, Read<T>>();

  /** `key`'s read under way, or `load()` started; its value goes to `keep` unless overtaken. */
  read(key: string, load: () => Promise<T>, keep: (value: T) => void): Promise<T> {
    const pending = this.reads.get(key);
    if (pending) return pending.promise;
    const read: Read<T> = {
      current: true,
      promise: load()
        .then((value) => {
          if (read.current) keep(value);
          return value;
        })
        .finally(() => {
          if (this.reads.get(key) === read) this.reads.delete(key);
        }),
    };
    this.reads.set(key, read);
    return read.promise;
  }

  /** Whether a read of `key` is under way. */
  has(key: string): boolean {
    return this.reads.has(key);
  }

  /** The read of `key` under way (of every key, without one) answers its callers and is not kept. */
  overtake(key?: string): void {
    const overtaken = key === undefined ? [...this.reads.values()] : [this.reads.get(key)];
    for (const read of overtaken) if (read) read.current = false;
    if (key === undefined) this.reads.clear();
    else this.reads.delete(key);
  }
}
