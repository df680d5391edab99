// One DEALER socket to a Scaler scheduler: a routing id of the documented form, ordered sends, decoded receives.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import * as zmq from "zeromq";
import { decode, encode, MalformedError, type Msg } from "./protocol.js";

/** `C|host|pid|<32 hex random>` for clients, `W|...` for workers (128 random bits: unguessable). */
export function routingId(role: "C" | "W"): string {
  return `${role}|${hostname()}|${process.pid}|${randomBytes(16).toString("hex")}`;
}

export class Link {
  readonly socket: zmq.Dealer;
  private sending: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    readonly address: string,
    role: "C" | "W",
  ) {
    if (!/^(tcp|ipc|inproc):\/\//.test(address)) {
      throw new Error(`bad scheduler address ${JSON.stringify(address)}: expected tcp://host:port or ipc://path`);
    }
    this.socket = new zmq.Dealer({
      routingId: routingId(role),
      linger: 0,
      sendHighWaterMark: 0,
      receiveHighWaterMark: 0,
    });
    this.socket.connect(address);
  }

  /** Send a message; sends keep their order (zeromq.js allows one send in flight at a time). */
  send(msg: Msg): Promise<void> {
    if (this.closed) return Promise.resolve();
    const frames = encode(msg);
    const next = this.sending.then(async () => {
      if (!this.closed) await this.socket.send(frames);
    });
    this.sending = next.catch(() => undefined);
    return next;
  }

  /** Decoded messages as they arrive; a malformed one is reported to `onMalformed` and skipped. */
  async *messages(onMalformed: (error: MalformedError) => void): AsyncGenerator<Msg> {
    try {
      for await (const frames of this.socket) {
        try {
          yield decode(frames);
        } catch (error) {
          if (error instanceof MalformedError) onMalformed(error);
          else throw error;
        }
      }
    } catch (error) {
      if (!this.closed) throw error;
    }
  }

  /** Wait (at most `timeoutMs`) for queued sends to leave, then close the socket. */
  async close(timeoutMs = 1000): Promise<void> {
    if (this.closed) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.sending, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    this.closed = true;
    this.socket.linger = Math.min(timeoutMs, 1000);
    this.socket.close();
  }
}
