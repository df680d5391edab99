// A Scaler client in TypeScript for tasks of the JSON payload convention: every task requires `payload=json`
// (plus any capabilities asked for), so only JSON workers (such as worker.ts) run it.
import { hostname } from "node:os";
import { functionObject, PAYLOAD_JSON, toJson } from "./json.js";
import { loadPeerKeys, resolveKeys, type PeerKeys } from "./keys.js";
import { Link } from "./link.js";
import { decodeErrorPayload, encodeMessages, hex, text, type Msg, type Task, type TaskStatusName } from "./protocol.js";

/** The task raised an error in the worker; `message` is the remote error's text (message and stack). */
export class RemoteError extends Error {
  constructor(readonly text: string) {
    super(text);
    this.name = "RemoteError";
  }
}

/** The system could not run the task (status failed, timedOut, overMemory, crashed), or the scheduler refused it. */
export class TaskFailedError extends Error {
  constructor(
    readonly status: TaskStatusName | "refused" | "lost",
    message: string,
  ) {
    super(message);
    this.name = "TaskFailedError";
  }
}

/** No connected worker offers the capabilities the task requires (text starting with "missing capabilities:"). */
export class MissingCapabilityError extends TaskFailedError {
  constructor(message: string) {
    super("failed", message);
    this.name = "MissingCapabilityError";
  }
}

export class CanceledError extends Error {
  constructor(readonly taskId: bigint) {
    super(`task ${hex(taskId)} was canceled`);
    this.name = "CanceledError";
  }
}

export class ConnectionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConnectionError";
  }
}

/** The scheduler does not accept this client's key, or keys on one side only (a ConnectionError: no session). */
export class AuthenticationError extends ConnectionError {
  constructor(message: string) {
    super(message);
    this.name = "AuthenticationError";
  }
}

export { KeysError } from "./keys.js";
export { FrameLimitError } from "./protocol.js";

const BATCH_LIMIT = 4096; // tasks per submitTasks message, as the Python client
const EXPLAIN_LIMIT = 1024; // ids per explainTasks message (protocol.md)

export interface ClientOptions {
  name?: string;
  heartbeatIntervalMs?: number; // default 2000
  timeoutMs?: number; // give up connecting, or on a silent scheduler, after this long (default 60 s)
  // A keys directory (scheduler.key and client.key_secret, as scaler_keygen makes them) for a scheduler run with
  // --keys; default $SCALER_KEYS if set; false: no keys whatever the environment says.
  keys?: string | false;
}

export interface SubmitOptions {
  kwargs?: Record<string, unknown>; // keyword arguments (the worker passes them as one last object argument)
  capabilities?: string[]; // required besides payload=json
  timeoutMs?: number; // stop the task after this long running (the worker answers timedOut)
  retries?: number;
  priority?: number;
}

/** A submitted task: its id and its outcome. `result` rejects with RemoteError, TaskFailedError or CanceledError. */
export interface TaskHandle {
  readonly taskId: bigint;
  readonly result: Promise<unknown>;
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

export class Client {
  readonly name: string;
  private readonly heartbeatIntervalMs: number;
  private readonly timeoutMs: number;
  private readonly keysOption: string | false | undefined;
  private link: Link | undefined;
  private idPrefix = 0n;
  private counter = 0n;
  private functions = new Map<string, bigint>();
  private pending = new Map<bigint, Pending>();
  // explainTasks asked and not answered, in the order asked (the scheduler answers each, in order)
  private explaining: { ids: bigint[]; resolve: (texts: string[]) => void; reject: (error: Error) => void }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastHeard = 0;
  private lastBeat = 0;
  private closed: Error | undefined;
  maxPayloadBytes = 0n;
  schedulerName = "";

  constructor(
    readonly address: string,
    options: ClientOptions = {},
  ) {
    this.name = options.name ?? `ts-client|${hostname()}|${process.pid}`;
    this.heartbeatIntervalMs = options.heartbeatIntervalMs ?? 2000;
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.keysOption = options.keys;
  }

  /** Open the session: hello, then wait (at most timeoutMs) for welcome. */
  async connect(): Promise<void> {
    if (this.link) throw new Error("connect() was called already");
    const directory = resolveKeys(this.keysOption);
    const keys: PeerKeys | undefined = directory === undefined ? undefined : loadPeerKeys(directory, "client");
    let welcomed!: () => void;
    let refused!: (error: Error) => void;
    const welcome = new Promise<void>((resolve, reject) => {
      welcomed = resolve;
      refused = reject;
    });
    const link = new Link(this.address, "C", keys, (why) => {
      const error = new AuthenticationError(why);
      refused(error);
      this.fail(error);
      void this.close();
    });
    this.link = link;
    this.lastHeard = Date.now();
    const reading = (async () => {
      for await (const msg of link.messages((error) => console.error(`[scaler-ts client] malformed message: ${error.message}`))) {
        this.lastHeard = Date.now();
        if (msg.type === "welcome") {
          this.idPrefix = BigInt(msg.idPrefix);
          this.maxPayloadBytes = msg.maxPayloadBytes;
          this.schedulerName = msg.schedulerName;
          welcomed();
        } else if (msg.type === "refused") {
          const error = msg.keyProblem
            ? new AuthenticationError(`authentication failed: the scheduler refused this client's key: ${msg.reason}`)
            : new ConnectionError(`the scheduler refused the client: ${msg.reason}`);
          refused(error);
          this.fail(error);
        } else {
          this.handle(msg);
        }
      }
    })();
    reading.catch((error: unknown) => this.fail(new ConnectionError(`receiving failed: ${String(error)}`)));
    void link.send({
      type: "hello",
      kind: "client",
      name: this.name,
      hostname: hostname(),
      pid: process.pid,
      heartbeatIntervalMs: this.heartbeatIntervalMs,
      queueCapacity: 0,
      capabilities: [],
    });
    let timeout: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        welcome,
        new Promise<never>(
          (_, reject) =>
            (timeout = setTimeout(
              () => reject(new ConnectionError(`no answer from the scheduler at ${this.address} within ${this.timeoutMs} ms`)),
              this.timeoutMs,
            )),
        ),
      ]);
    } catch (error) {
      await this.close();
      throw error;
    } finally {
      clearTimeout(timeout);
    }
    this.timer = setInterval(() => this.tick(), Math.min(250, this.heartbeatIntervalMs));
  }

  private tick(): void {
    const now = Date.now();
    if (now - this.lastHeard > this.timeoutMs) {
      this.fail(new ConnectionError(`the scheduler has been silent for ${this.timeoutMs} ms`));
      void this.close();
      return;
    }
    if (now - this.lastBeat >= this.heartbeatIntervalMs) {
      this.lastBeat = now;
      void this.link!.send({ type: "heartbeat" });
    }
  }

  private nextId(): bigint {
    this.counter += 1n;
    return (this.idPrefix << 40n) | this.counter;
  }

  private checkSize(payload: Uint8Array, what: string): void {
    if (this.maxPayloadBytes > 0n && BigInt(payload.byteLength) > this.maxPayloadBytes) {
      throw new Error(`${what} is ${payload.byteLength} bytes, over the scheduler's limit of ${this.maxPayloadBytes}`);
    }
  }

  /** Submit one call of the worker function `fn` with JSON arguments. */
  submit(fn: string, args: unknown[] = [], options: SubmitOptions = {}): TaskHandle {
    return this.submitMany(fn, [args], options)[0]!;
  }

  /** Submit a call of `fn` per argument list, in messages of at most 4,096 tasks (protocol.md, submitTasks). */
  submitMany(fn: string, argLists: unknown[][], options: SubmitOptions = {}): TaskHandle[] {
    if (this.closed) throw this.closed;
    if (!this.link || this.idPrefix === 0n) throw new Error("not connected: await connect() first");
    const link = this.link;
    let functionId = this.functions.get(fn);
    if (functionId === undefined) {
      functionId = this.nextId();
      this.functions.set(fn, functionId);
      void link.send({ type: "putObjects", objects: [{ objectId: functionId, name: fn, payload: functionObject(fn) }] });
    }
    const requires = [...new Set([PAYLOAD_JSON, ...(options.capabilities ?? [])])];
    const kwargs = Object.entries(options.kwargs ?? {});
    const tasks: Task[] = argLists.map((args) => {
      const all = [
        ...args.map((value) => ({ ref: 0n, keyword: "", payload: toJson(value) })),
        ...kwargs.map(([keyword, value]) => ({ ref: 0n, keyword, payload: toJson(value) })),
      ];
      all.forEach((arg, i) => this.checkSize(arg.payload, `argument ${i}`));
      return {
        taskId: this.nextId(),
        functionId: functionId!,
        flags: 0,
        args: all,
        timeoutMs: options.timeoutMs ?? 0,
        retries: options.retries ?? 0,
        priority: options.priority ?? 0,
        requires,
      };
    });
    // encoded before any task is registered: a task whose description cannot fit a header throws FrameLimitError
    const messages: Uint8Array[][] = [];
    for (let at = 0; at < tasks.length; at += BATCH_LIMIT) {
      messages.push(...encodeMessages({ type: "submitTasks", tasks: tasks.slice(at, at + BATCH_LIMIT) }));
    }
    const handles = tasks.map((task) => {
      const result = new Promise<unknown>((resolve, reject) => this.pending.set(task.taskId, { resolve, reject }));
      result.catch(() => undefined); // the caller may never look: no unhandled rejection
      return { taskId: task.taskId, result };
    });
    void link.sendEncoded(messages);
    return handles;
  }

  /** Submit and wait for the result. */
  call(fn: string, args: unknown[] = [], options: SubmitOptions = {}): Promise<unknown> {
    return this.submit(fn, args, options).result;
  }

  /** Ask the scheduler to cancel tasks; their results reject with CanceledError (or arrive if they ended first). */
  cancel(...handles: (TaskHandle | bigint)[]): void {
    const ids = handles.map((h) => (typeof h === "bigint" ? h : h.taskId)).filter((id) => this.pending.has(id));
    if (ids.length && this.link) void this.link.send({ type: "cancelTasks", ids });
  }

  /** Why is my task waiting? One text per task, as the scheduler sees it now: waiting for other tasks' results, queued
   * and why (no worker connected, none offers what it requires, all busy or draining, what the worker managers do),
   * or at which worker (protocol.md, explainTasks). Another client's task, or one that ended, is "not in the
   * scheduler". Rejects if the session ends first. */
  async explain(...handles: (TaskHandle | bigint)[]): Promise<string[]> {
    if (this.closed) throw this.closed;
    if (!this.link || this.idPrefix === 0n) throw new Error("not connected: await connect() first");
    const ids = handles.map((h) => (typeof h === "bigint" ? h : h.taskId));
    const parts: Promise<string[]>[] = [];
    for (let at = 0; at < ids.length; at += EXPLAIN_LIMIT) {
      const chunk = ids.slice(at, at + EXPLAIN_LIMIT);
      parts.push(new Promise<string[]>((resolve, reject) => this.explaining.push({ ids: chunk, resolve, reject })));
      void this.link.send({ type: "explainTasks", ids: chunk });
    }
    return (await Promise.all(parts)).flat();
  }

  private explained(taskIds: bigint[], texts: string[]): void {
    while (this.explaining.length) {
      const asked = this.explaining.shift()!;
      if (asked.ids.length === taskIds.length && asked.ids.every((id, k) => id === taskIds[k])) {
        asked.resolve(texts);
        return;
      }
      asked.reject(new Error("the scheduler did not answer this explainTasks"));
    }
  }

  private handle(msg: Msg): void {
    switch (msg.type) {
      case "taskExplanations":
        this.explained(msg.taskIds, msg.texts);
        return;
      case "taskResults":
        for (const result of msg.results) {
          const pending = this.pending.get(result.taskId);
          if (!pending) continue;
          this.pending.delete(result.taskId);
          switch (result.status) {
            case "success":
              try {
                pending.resolve(JSON.parse(text(result.payload)));
              } catch (error) {
                pending.reject(new Error(`the result of task ${hex(result.taskId)} is not JSON: ${String(error)}`));
              }
              break;
            case "error":
              pending.reject(new RemoteError(decodeErrorPayload(result.payload)));
              break;
            case "canceled":
              pending.reject(new CanceledError(result.taskId));
              break;
            default: {
              const why = text(result.payload);
              pending.reject(
                why.startsWith("missing capabilities:") ? new MissingCapabilityError(why) : new TaskFailedError(result.status, why),
              );
            }
          }
        }
        return;
      case "error": {
        const error = new TaskFailedError("refused", `the scheduler answered ${msg.code}: ${msg.message}`);
        if (msg.code === "notConnected") {
          this.fail(new ConnectionError("the scheduler lost this client's session (notConnected)"));
          return;
        }
        for (const id of msg.ids) {
          const pending = this.pending.get(id);
          if (pending) {
            this.pending.delete(id);
            pending.reject(error);
          }
        }
        return;
      }
      case "shutdown":
        this.fail(new ConnectionError(`the scheduler is stopping: ${msg.reason}`));
        void this.close();
        return;
      case "heartbeatEcho":
      case "taskOutput":
        return;
      default:
        console.error(`[scaler-ts client] ignored a ${msg.type} message`);
    }
  }

  private fail(error: Error): void {
    this.closed ??= error;
    for (const pending of this.pending.values()) pending.reject(error);
    this.pending.clear();
    for (const asked of this.explaining.splice(0)) asked.reject(error);
  }

  /** Say disconnect (the scheduler cancels what is unfinished) and close. */
  async disconnect(reason = "the client is done"): Promise<void> {
    if (this.link && !this.closed && this.idPrefix !== 0n) {
      await this.link.send({ type: "disconnect", reason }).catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 50)); // libzmq sends it from its I/O thread
    }
    this.fail(new ConnectionError("the client disconnected"));
    await this.close();
  }

  private async close(): Promise<void> {
    clearInterval(this.timer);
    await this.link?.close();
  }
}
