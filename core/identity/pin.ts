/**
 * PIN hashing (SPEC 2.4): argon2id, a random per-credential salt, and the tenant's PIN secret
 * as argon2's `secret` (pepper) input. Parameters are versioned by `kdf_version`; a login that
 * verifies against an older version rehashes in the background. All argon2 work runs through
 * one bounded semaphore so a burst of logins queues instead of exhausting memory.
 *
 * A 4–6 digit PIN has at most 10^6 values: the pepper, not the hash cost, is what makes a
 * stolen credentials table useless offline; the cost bounds online and insider attempts.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { availableParallelism } from 'node:os';
import argon2 from 'argon2';
import { Semaphore } from './semaphore.ts';

export interface KdfParams {
  memoryKiB: number;
  timeCost: number;
  parallelism: number;
}

/** kdf_version → parameters. Append a version to raise the cost; never change one. */
export const kdfVersions: Readonly<Record<number, KdfParams>> = Object.freeze({
  // 1: legacy (OWASP 2021 second option, m=15 MiB, t=2): below today's floor, rehashed on login
  1: { memoryKiB: 15 * 1024, timeCost: 2, parallelism: 1 },
  // 2: OWASP password storage cheat sheet minimum for argon2id: m=19 MiB, t=2, p=1
  2: { memoryKiB: 19 * 1024, timeCost: 2, parallelism: 1 },
});
export const currentKdfVersion = 2;

const saltBytes = 16;
const hashBytes = 32;
/**
 * Concurrent argon2 computations: one per CPU (more only time-slices the same cores and adds
 * latency to every hash), at most 4 (libuv's default thread pool) = at most 76 MiB of argon2 memory.
 */
export const argonConcurrency = Math.max(1, Math.min(4, availableParallelism()));
/**
 * Hashes allowed to wait; past this a login answers 429 with Retry-After at once (issue 18 item
 * 4). A waiter's wait is about (its place ÷ concurrency) hashes: with a hash at ~50–100 ms on
 * this class of machine, eight per running hash keep a queued login within about a second, where
 * the old bound (256) held a burst for 10 s and more, past clients' own timeouts.
 */
export const argonMaxQueue = Math.max(8, 8 * argonConcurrency);

export interface PinHash {
  hash: Buffer;
  salt: Buffer;
  kdfVersion: number;
}

export class PinHasher {
  readonly gate: Semaphore;

  constructor(opts: { concurrency?: number; maxQueue?: number } = {}) {
    this.gate = new Semaphore(opts.concurrency ?? argonConcurrency, opts.maxQueue ?? argonMaxQueue);
  }

  private raw(pin: string, salt: Buffer, pepper: Buffer, version: number): Promise<Buffer> {
    return this.gate.run(() => argonHash(pin, salt, pepper, version));
  }

  /**
   * Take a slot of the gate before the attempt is counted, and check PINs within it (login):
   * a login turned away because the queue is full (SemaphoreFull, at once) has then counted
   * nothing toward the phone's lockout (issue 18 item 4). The slot must be released.
   */
  async reserve(): Promise<PinSlot> {
    const release = await this.gate.acquire();
    return {
      release,
      verify: async (pin, pepper, stored) =>
        matches(await argonHash(pin, stored.salt, pepper, stored.kdfVersion), stored),
      verifyDummy: async (pin, pepper) => {
        await argonHash(pin, dummySalt, pepper ?? dummyPepper, currentKdfVersion);
        return false;
      },
    };
  }

  /** Hash a new PIN with the current parameters (or `version`, for tests and migrations). */
  async hash(pin: string, pepper: Buffer, version = currentKdfVersion): Promise<PinHash> {
    const salt = randomBytes(saltBytes);
    return { hash: await this.raw(pin, salt, pepper, version), salt, kdfVersion: version };
  }

  /** Constant-time comparison of `pin` against a stored hash. */
  async verify(pin: string, pepper: Buffer, stored: PinHash): Promise<boolean> {
    return matches(await this.raw(pin, stored.salt, pepper, stored.kdfVersion), stored);
  }

  /**
   * Spend the same work as a real verification and answer false: used when the phone is
   * unknown, has no PIN, or the tenant does not exist, so timing does not tell them apart.
   */
  async verifyDummy(pin: string, pepper: Buffer | undefined): Promise<false> {
    await this.raw(pin, dummySalt, pepper ?? dummyPepper, currentKdfVersion);
    return false;
  }
}

/** PIN checks within a slot of the gate already held (PinHasher.reserve). */
export interface PinSlot {
  verify(pin: string, pepper: Buffer, stored: PinHash): Promise<boolean>;
  verifyDummy(pin: string, pepper: Buffer | undefined): Promise<false>;
  release(): void;
}

function argonHash(pin: string, salt: Buffer, pepper: Buffer, version: number): Promise<Buffer> {
  const p = kdfVersions[version];
  if (!p) throw new Error(`unknown kdf_version ${version}`);
  return argon2.hash(pin, {
    type: argon2.argon2id,
    raw: true,
    salt,
    secret: pepper,
    hashLength: hashBytes,
    memoryCost: p.memoryKiB,
    timeCost: p.timeCost,
    parallelism: p.parallelism,
  });
}

/** Constant-time comparison of a computed hash with the stored one. */
const matches = (computed: Buffer, stored: PinHash): boolean =>
  computed.length === stored.hash.length && timingSafeEqual(computed, stored.hash);

const dummySalt = randomBytes(saltBytes);
const dummyPepper = randomBytes(32);

/** True when a stored hash should be recomputed with the current parameters. */
export function needsRehash(kdfVersion: number): boolean {
  return kdfVersion < currentKdfVersion;
}
