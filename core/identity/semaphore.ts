/**
 * A counting semaphore with a bounded queue: at most `limit` holders at once, at most
 * `maxQueue` waiters; past that `acquire` refuses at once instead of piling up memory
 * (argon2 uses ~19 MiB per running hash, so a login burst must queue, not fan out).
 */
export class SemaphoreFull extends Error {
  constructor() {
    super('too many waiters');
  }
}

export class Semaphore {
  private active = 0;
  private readonly waiters: (() => void)[] = [];

  constructor(
    readonly limit: number,
    readonly maxQueue: number,
  ) {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError('semaphore limit must be a positive integer');
  }

  /** Every slot held and the queue at its bound: `acquire` would refuse now. */
  get full(): boolean {
    return this.active >= this.limit && this.waiters.length >= this.maxQueue;
  }

  /** Current holders and waiters, for metrics and tests. */
  get stats(): { active: number; queued: number } {
    return { active: this.active, queued: this.waiters.length };
  }

  /**
   * Wait for a slot and return its release (call exactly once); throws SemaphoreFull at once
   * when the queue is at its bound.
   */
  async acquire(): Promise<() => void> {
    if (this.active >= this.limit) {
      if (this.waiters.length >= this.maxQueue) throw new SemaphoreFull();
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    } else {
      this.active++;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      // The slot passes straight to the next waiter, so `active` stays the same.
      if (next) next();
      else this.active--;
    };
  }

  /** Run `fn` once a slot is free; throws SemaphoreFull when the queue is at its bound. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await fn();
    } finally {
      release();
    }
  }
}
