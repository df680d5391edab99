// One DEALER socket to a Scaler scheduler: a routing id of the documented form, ordered sends, decoded receives.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import * as zmq from "zeromq";
import type { PeerKeys, Role } from "./keys.js";
import { decode, encodeMessages, MalformedError, type Msg } from "./protocol.js";

/** `C|host|pid|<32 hex random>` for clients, `W|...` for workers (128 random bits: unguessable). */
export function routingId(role: "C" | "W"): string {
  return `${role}|${hostname()}|${process.pid}|${randomBytes(16).toString("hex")}`;
}

export class Link {
  readonly socket: zmq.Dealer;
  private sending: Promise<void> = Promise.resolve();
  private closed = false;
  private closing: Promise<void> | undefined;

  /**
   * With `keys`, the connection is CurveZMQ: encrypted, and admitted only if the scheduler knows this peer's public
   * key. A failed handshake (the scheduler refused the key, has another key, or runs without keys) is reported once
   * to `onAuthFailure` in words a user can act on: ZeroMQ itself would only try again, silently, for ever.
   */
  constructor(
    readonly address: string,
    role: "C" | "W",
    readonly keys?: PeerKeys,
    onAuthFailure?: (why: string) => void,
  ) {
    if (!/^(tcp|ipc|inproc):\/\//.test(address)) {
      throw new Error(`bad scheduler address ${JSON.stringify(address)}: expected tcp://host:port or ipc://path`);
    }
    this.socket = new zmq.Dealer({
      routingId: routingId(role),
      linger: 0,
      sendHighWaterMark: 0,
      receiveHighWaterMark: 0,
      ...(keys ? { curveServerKey: keys.serverKey, curvePublicKey: keys.publicKey, curveSecretKey: keys.secretKey } : {}),
    });
    if (onAuthFailure) this.watchHandshakes(role === "C" ? "client" : "worker", onAuthFailure);
    this.socket.connect(address);
  }

  private watchHandshakes(role: Role, onAuthFailure: (why: string) => void): void {
    let told = false;
    const tell = (why: string): void => {
      if (!told && !this.closed) {
        told = true;
        onAuthFailure(why);
      }
    };
    this.socket.events.on("handshake:error:auth", () => tell(authFailure("auth", this.address, this.keys, role)));
    this.socket.events.on("handshake:error:protocol", (event) =>
      tell(authFailure(event.error.code === "ERR_ZMTP_MECHANISM_MISMATCH" ? "mismatch" : "other", this.address, this.keys, role)),
    );
    // A handshake closed without a word is what a wrong scheduler key gives, but also a connection the scheduler closed
    // while too many were connecting at once: told only after UNCLEAR_FAILURES in a row (ZeroMQ tries again
    // meanwhile), as the Python peers do (src/scaler/io/curve.py).
    let unclear = 0;
    this.socket.events.on("handshake", () => {
      unclear = 0;
    });
    this.socket.events.on("handshake:error:other", () => {
      unclear += 1;
      if (unclear >= UNCLEAR_FAILURES) tell(authFailure("other", this.address, this.keys, role));
    });
  }

  /** Send a message (as several if its header would pass 1 MiB: encodeMessages); sends keep their order (zeromq.js
   * allows one send in flight at a time). Throws FrameLimitError at once if one item alone does not fit a header. */
  send(msg: Msg): Promise<void> {
    return this.sendEncoded(encodeMessages(msg));
  }

  /** Send messages encoded already (encodeMessages), in order. */
  sendEncoded(messages: readonly Uint8Array[][]): Promise<void> {
    if (this.closed) return Promise.resolve();
    const next = this.sending.then(async () => {
      for (const frames of messages) if (!this.closed) await this.socket.send(frames);
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

  /** Wait (at most `timeoutMs`) for queued sends to leave, then close the socket. Once: later calls wait for it. */
  close(timeoutMs = 1000): Promise<void> {
    this.closing ??= this.closeOnce(timeoutMs);
    return this.closing;
  }

  private async closeOnce(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.sending, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    this.closed = true;
    this.socket.linger = Math.min(timeoutMs, 1000);
    this.socket.close();
  }
}

/** Handshakes closed without a word, in a row, before one counts as an authentication failure. */
export const UNCLEAR_FAILURES = 3;

/** Authentication failed, why (as far as the failed handshake tells), and what to check: the Python peers' words. */
export function authFailure(kind: "auth" | "mismatch" | "other", address: string, keys: PeerKeys | undefined, role: Role): string {
  if (!keys) {
    return (
      `authentication failed: the scheduler at ${address} requires keys and this ${role} has none; pass the keys ` +
      `directory (keys: DIR, --keys DIR, or SCALER_KEYS=DIR) holding scheduler.key and ${role}.key_secret`
    );
  }
  if (kind === "mismatch") {
    return (
      `authentication failed: this ${role} has keys (${keys.source}) but the scheduler at ${address} runs without keys; ` +
      "it will not fall back to an unencrypted connection: start the scheduler with --keys, or drop the keys here"
    );
  }
  if (kind === "auth") {
    return (
      `authentication failed: the scheduler at ${address} does not accept this ${role}'s key (${keys.source}); its ` +
      `public key must be in the scheduler's authorized_${role}s/ folder (scaler_keygen DIR --${role} NAME makes one there)`
    );
  }
  return (
    `authentication failed: the handshake with ${address} failed: either scheduler.key next to ${keys.source} is not ` +
    `the public key of the scheduler at that address, or that scheduler runs without keys (this ${role} never falls ` +
    "back to an unencrypted connection)"
  );
}
