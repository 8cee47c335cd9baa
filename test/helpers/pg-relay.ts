/**
 * A TCP relay in front of PostgreSQL for fault injection: connections held before they are
 * relayed, refused, or silenced (authenticated, then nothing more answers), each new one as the
 * next entry of `plan` says, or else as the relay's fields say.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

/** How one connection is treated. */
export interface ConnectionPlan {
  delayMs?: number;
  silenceAtFirstQuery?: boolean;
  /** Closed as soon as it is accepted (a server refusing connections). */
  refuse?: boolean;
  /**
   * Every other message relayed both ways, but the server's notifications (NotificationResponse)
   * dropped: a connection that answers every query yet hears nothing it LISTENs for (as through a
   * pooler in transaction mode, whose LISTEN ran on some other server connection).
   */
  dropNotifications?: boolean;
}

/** PostgreSQL's NotificationResponse message type ('A'). */
const notificationMessage = 0x41;

/**
 * The server's side of a connection, its NotificationResponse messages removed. Every message the
 * server sends (from its first, no TLS asked) is a type byte and an int32 length counting itself.
 */
function withoutNotifications(): (d: Buffer) => Buffer {
  let pending = Buffer.alloc(0);
  return (d) => {
    pending = Buffer.concat([pending, d]);
    const kept: Buffer[] = [];
    let at = 0;
    while (pending.length - at >= 5) {
      const end = at + 1 + pending.readInt32BE(at + 1);
      if (end > pending.length) break;
      if (pending[at] !== notificationMessage) kept.push(pending.subarray(at, end));
      at = end;
    }
    pending = pending.subarray(at);
    return Buffer.concat(kept);
  };
}

/**
 * The message types that start a statement: a simple query ('Q': LISTEN, SELECT 1) and the
 * extended protocol's Parse ('P': any statement with parameters).
 */
const queryMessages = new Set([0x51, 0x50]);

/**
 * A TCP relay to PostgreSQL that can hold each new connection before relaying it, and counts
 * them. A silenced connection carries nothing more either way and is never closed by the relay
 * (the edge's FIN goes unanswered, as with a peer that is gone); its database side is closed once
 * the edge lets go, so that pg_stat_activity counts what the edge holds.
 */
export class Relay {
  delayMs = 0;
  /** New connections fall silent at their first query (authenticated, then nothing answers). */
  silenceAtFirstQuery = false;
  /** New connections are closed at once. */
  refuse = false;
  /** New connections relay everything but the server's notifications (see ConnectionPlan). */
  dropNotifications = false;
  /** How the next connections are treated, in order (taken before the fields above). */
  readonly plan: ConnectionPlan[] = [];
  readonly open = new Set<Socket>();
  /** Connections accepted so far. */
  accepted = 0;
  private readonly silent = new Set<Socket>();
  private readonly releasedByEdge = new Set<Socket>();
  private server: Server | undefined;

  async start(target: { host: string; port: number }): Promise<number> {
    this.server = createServer({ allowHalfOpen: true }, (inbound) => this.relay(inbound, target));
    await new Promise<void>((r) => this.server?.listen(0, '127.0.0.1', r));
    const address = this.server.address();
    if (!address || typeof address === 'string') throw new Error('relay has no port');
    return address.port;
  }

  private relay(inbound: Socket, target: { host: string; port: number }): void {
    this.accepted++;
    const plan = this.plan.shift() ?? {};
    if (plan.refuse ?? this.refuse) {
      inbound.destroy();
      return;
    }
    this.open.add(inbound);
    inbound.on('close', () => {
      this.open.delete(inbound);
      this.silent.delete(inbound);
    });
    inbound.on('error', () => inbound.destroy());
    inbound.on('end', () => this.releasedByEdge.add(inbound));
    const silenceAtFirstQuery = plan.silenceAtFirstQuery ?? this.silenceAtFirstQuery;
    const fromServer =
      (plan.dropNotifications ?? this.dropNotifications) ? withoutNotifications() : (d: Buffer) => d;
    setTimeout(() => {
      if (inbound.destroyed) return;
      const outbound = connect(target.port, target.host);
      outbound.on('error', () => inbound.destroy());
      inbound.on('close', () => outbound.destroy());
      outbound.on('close', () => {
        if (!this.silent.has(inbound)) inbound.destroy();
      });
      inbound.on('end', () => (this.silent.has(inbound) ? outbound.destroy() : outbound.end()));
      inbound.on('data', (d: Buffer) => {
        if (silenceAtFirstQuery && queryMessages.has(d[0] as number)) this.silent.add(inbound);
        if (!this.silent.has(inbound)) outbound.write(d);
      });
      outbound.on('data', (d: Buffer) => {
        if (!this.silent.has(inbound)) inbound.write(fromServer(d));
      });
    }, plan.delayMs ?? this.delayMs);
  }

  /** Every connection open now falls silent. */
  silenceAll(): void {
    for (const s of this.open) this.silent.add(s);
  }

  silentCount(): number {
    return this.silent.size;
  }

  /** Silenced connections the edge has not closed on its side. */
  silentHeldByEdge(): number {
    return [...this.silent].filter((s) => !this.releasedByEdge.has(s)).length;
  }

  /** Connections the edge has not closed on its side. */
  heldByEdge(): number {
    return [...this.open].filter((s) => !this.releasedByEdge.has(s)).length;
  }

  cutAll(): void {
    for (const s of this.open) s.destroy();
  }

  async stop(): Promise<void> {
    this.cutAll();
    await new Promise((r) => this.server?.close(r));
  }
}

/** `url` (a PostgreSQL URL) pointed at a relay started on 127.0.0.1 in front of its server. */
export async function throughRelay(relay: Relay, url: string): Promise<string> {
  const u = new URL(url);
  const port = await relay.start({ host: u.hostname, port: Number(u.port) });
  u.hostname = '127.0.0.1';
  u.port = String(port);
  return u.toString();
}
