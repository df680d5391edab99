// A Scaler worker in TypeScript for tasks of the JSON payload convention (capabilities `payload=json`, `lang=ts`).
// Functions are registered by name; a task's function object names one (src/json.ts).
//
//   node ts/dist/worker.js ADDRESS [--capability X]... [--name N] [--queue-capacity N] [--concurrency N]
import { hostname } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { fromJson, functionName, PAYLOAD_JSON, toJson } from "./json.js";
import { loadPeerKeys, resolveKeys, type PeerKeys } from "./keys.js";
import { Link } from "./link.js";
import {
  encodeErrorPayload,
  FLAG_PROFILE,
  hex,
  prefixOf,
  utf8,
  type Msg,
  type Result,
  type Task,
} from "./protocol.js";

export type JsonFunction = (...args: any[]) => unknown;

/** The functions every JSON worker registers (the conformance kit calls them). */
export const CONFORMANCE_FUNCTIONS: Record<string, JsonFunction> = {
  echo: (...args: unknown[]) => (args.length > 0 ? args[0] : null),
  add: (...args: unknown[]) => {
    let sum = 0;
    for (const arg of args) {
      if (typeof arg !== "number") throw new TypeError(`add: ${JSON.stringify(arg)} is not a number`);
      sum += arg;
    }
    return sum;
  },
  fail: (message?: unknown) => {
    throw new Error(typeof message === "string" ? message : JSON.stringify(message ?? null));
  },
  sleep: async (ms?: unknown) => {
    const wait = typeof ms === "number" && ms > 0 ? ms : 0;
    await new Promise((resolve) => setTimeout(resolve, wait));
    return ms ?? null;
  },
};

const MAX_CAPABILITIES = 256;
const BATCH_MS = 5; // longest a result waits for those of the quick tasks that follow it

/** Why a capability is invalid, or undefined if it is valid (docs/protocol.md, "Capabilities"). */
export function capabilityProblem(capability: string): string | undefined {
  const bytes = Buffer.byteLength(capability, "utf8");
  if (bytes < 1 || bytes > 256) return `capability ${JSON.stringify(capability)} must be 1 to 256 bytes of UTF-8`;
  if (/[\x00-\x1f\x7f]/.test(capability)) return `capability ${JSON.stringify(capability)} has a control character`;
  if (capability.trim() !== capability) return `capability ${JSON.stringify(capability)} starts or ends with whitespace`;
  return undefined;
}

export interface WorkerOptions {
  name?: string;
  capabilities?: string[]; // besides payload=json and lang=ts
  queueCapacity?: number; // most tasks the scheduler may assign at once (default 64)
  concurrency?: number; // tasks run at once (default 1: like one Python processor)
  heartbeatIntervalMs?: number; // default 2000; never more than peerTimeoutMs / 4
  deathTimeoutMs?: number; // exit when the scheduler has been silent this long (default 300 s)
  functions?: Record<string, JsonFunction>; // added to the conformance functions
  log?: (line: string) => void;
  // A keys directory (scheduler.key and worker.key_secret, as scaler_keygen makes them) for a scheduler run with
  // --keys; default $SCALER_KEYS if set; false: no keys whatever the environment says. Read by the constructor.
  keys?: string | false;
}

interface Held {
  task: Task;
  started: boolean;
  answered: boolean;
}

class TimedOut {
  constructor(readonly ms: number) {}
}

export class Worker {
  readonly name: string;
  readonly capabilities: string[];
  readonly functions: Record<string, JsonFunction>;
  private readonly queueCapacity: number;
  private readonly concurrency: number;
  private readonly heartbeatIntervalMs: number;
  private readonly deathTimeoutMs: number;
  readonly log: (line: string) => void;
  readonly keys: PeerKeys | undefined;
  private link: Link | undefined;

  private connected = false;
  private epoch = 0; // bumped whenever the session's state is dropped: late results of old tasks are ignored
  private objects = new Map<bigint, Uint8Array>();
  private held = new Map<bigint, Held>();
  private queues = new Map<bigint, Held[]>(); // unstarted tasks by the session prefix of their id (fairness)
  private running = 0;
  private outResults: Result[] = [];
  private outStarted: bigint[] = [];
  private outErrors: { taskId: bigint; text: string }[] = [];
  private flushScheduled = false;
  private firstPendingAt = 0;
  private batchOpen = false;
  private pumpScheduled = false;

  private interval = 0;
  private lastHeard = 0;
  private lastHelloAt = 0;
  private beatSentAt = 0;
  private lagUs = 0n;
  private timer: NodeJS.Timeout | undefined;
  private stopping = false;
  private done!: (code: number) => void;
  readonly finished: Promise<number>;

  constructor(
    readonly address: string,
    options: WorkerOptions = {},
  ) {
    this.name = options.name ?? `ts-worker|${hostname()}|${process.pid}`;
    const extra = options.capabilities ?? [];
    for (const capability of extra) {
      const problem = capabilityProblem(capability);
      if (problem) throw new Error(problem);
    }
    this.capabilities = [...new Set([PAYLOAD_JSON, "lang=ts", ...extra])];
    if (this.capabilities.length > MAX_CAPABILITIES) {
      throw new Error(`a worker offers at most ${MAX_CAPABILITIES} capabilities, not ${this.capabilities.length}`);
    }
    this.queueCapacity = positive(options.queueCapacity ?? 64, "queueCapacity");
    this.concurrency = positive(options.concurrency ?? 1, "concurrency");
    this.heartbeatIntervalMs = positive(options.heartbeatIntervalMs ?? 2000, "heartbeatIntervalMs");
    this.deathTimeoutMs = positive(options.deathTimeoutMs ?? 300_000, "deathTimeoutMs");
    this.functions = { ...CONFORMANCE_FUNCTIONS, ...(options.functions ?? {}) };
    this.log = options.log ?? ((line) => console.error(`[scaler-ts worker ${this.name}] ${line}`));
    const directory = resolveKeys(options.keys);
    this.keys = directory === undefined ? undefined : loadPeerKeys(directory, "worker");
    this.finished = new Promise((resolve) => (this.done = resolve));
  }

  /** Connect and serve until the scheduler says shutdown (0), refuses (1), goes silent (1), or stop() (0). */
  async run(): Promise<number> {
    // A failed handshake is the scheduler refusing this worker's keys: stop, saying why (as the Python agent does).
    const link = new Link(this.address, "W", this.keys, (why) => {
      this.log(why);
      void this.stop(1, false);
    });
    this.link = link;
    this.lastHeard = Date.now();
    this.interval = this.heartbeatIntervalMs;
    this.sayHello();
    this.timer = setInterval(() => this.tick(), 100);
    const reading = (async () => {
      for await (const msg of link.messages((error) => this.log(`dropped a malformed message: ${error.message}`))) {
        if (this.stopping) break;
        this.lastHeard = Date.now();
        this.handle(msg);
      }
    })();
    reading.catch((error: unknown) => {
      this.log(`receiving failed: ${String(error)}`);
      void this.stop(1, false);
    });
    return this.finished;
  }

  /** Leave: say disconnect (unless the scheduler is gone), close the socket, end run() with `code`. */
  async stop(code = 0, sayGoodbye = true, reason = "the worker is stopping"): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    clearInterval(this.timer);
    this.epoch += 1;
    if (this.link) {
      if (sayGoodbye && this.connected) {
        await this.link.send({ type: "disconnect", reason }).catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 100)); // libzmq sends it from its I/O thread
      }
      await this.link.close(sayGoodbye ? 1000 : 0);
    }
    this.done(code);
  }

  // ---------------------------------------------------------------------------------------------- session
  private sayHello(): void {
    this.connected = false;
    this.lastHelloAt = Date.now();
    void this.link!.send({
      type: "hello",
      kind: "worker",
      name: this.name,
      hostname: hostname(),
      pid: process.pid,
      heartbeatIntervalMs: this.heartbeatIntervalMs,
      queueCapacity: this.queueCapacity,
      capabilities: this.capabilities,
    });
  }

  /** Forget every task and object of the session (results of tasks still running are ignored). */
  private dropEverything(): void {
    this.epoch += 1;
    this.objects.clear();
    this.held.clear();
    this.queues.clear();
    this.running = 0;
    this.outResults = [];
    this.outStarted = [];
    this.outErrors = [];
  }

  private tick(): void {
    const now = Date.now();
    if (now - this.lastHeard > this.deathTimeoutMs) {
      this.log(`the scheduler has been silent for ${Math.round((now - this.lastHeard) / 1000)} s: exiting`);
      void this.stop(1, true, "the scheduler was silent too long");
      return;
    }
    if (!this.connected) {
      if (now - this.lastHelloAt >= 10_000) this.sayHello();
      return;
    }
    if (now - this.beatSentAt >= this.interval) this.heartbeat(now);
  }

  private heartbeat(now: number): void {
    this.beatSentAt = now;
    const memory = process.memoryUsage();
    let queued = 0;
    for (const queue of this.queues.values()) queued += queue.length;
    void this.link!.send({
      type: "heartbeat",
      rssBytes: BigInt(memory.rss),
      lagUs: this.lagUs,
      queued,
      running: this.running,
      processorRssBytes: BigInt(memory.rss),
      processors: 1,
    });
  }

  private handle(msg: Msg): void {
    switch (msg.type) {
      case "welcome":
        this.dropEverything();
        this.connected = true;
        this.interval = Math.max(10, Math.min(this.heartbeatIntervalMs, Math.floor(msg.peerTimeoutMs / 4) || this.heartbeatIntervalMs));
        this.log(`connected to scheduler ${JSON.stringify(msg.schedulerName)} at ${this.address} (capabilities: ${this.capabilities.join(", ")})`);
        this.heartbeat(Date.now());
        return;
      case "refused":
        this.log(`the scheduler refused this worker: ${msg.reason}`);
        void this.stop(1, false);
        return;
      case "heartbeatEcho":
        if (this.beatSentAt > 0) {
          this.lagUs = BigInt(Math.max(0, Date.now() - this.beatSentAt) * 1000);
        }
        return;
      case "shutdown":
        this.log(`the scheduler is stopping (${msg.reason}): exiting`);
        void this.stop(0, false);
        return;
      case "error":
        if (msg.code === "notConnected") {
          if (this.connected) {
            this.log("the scheduler lost this worker's session (notConnected): dropping everything, saying hello again");
            this.dropEverything();
            this.sayHello();
          }
          return;
        }
        this.log(`the scheduler answered ${msg.code}: ${msg.message}${msg.ids.length ? ` (ids ${msg.ids.map(hex).join(", ")})` : ""}`);
        return;
      default:
        break;
    }
    if (!this.connected) return; // before welcome: nothing of a session can arrive
    switch (msg.type) {
      case "putObjects":
        for (const object of msg.objects) this.objects.set(object.objectId, object.payload);
        return;
      case "freeObjects":
        for (const id of msg.ids) this.objects.delete(id);
        return;
      case "dispatchTasks":
        for (const task of msg.tasks) {
          if (this.held.has(task.taskId)) continue; // a duplicate
          const held: Held = { task, started: false, answered: false };
          this.held.set(task.taskId, held);
          const prefix = prefixOf(task.taskId);
          const queue = this.queues.get(prefix);
          if (queue) queue.push(held);
          else this.queues.set(prefix, [held]);
        }
        this.schedulePump();
        return;
      case "cancelTasks":
        for (const id of msg.ids) {
          const held = this.held.get(id);
          if (!held) continue;
          if (!held.started) this.unqueue(held);
          else this.running -= 1; // it runs on, its outcome is ignored
          this.answer(held, { taskId: id, status: "canceled", payload: new Uint8Array(0) });
        }
        this.schedulePump();
        return;
      case "balanceRequest": {
        const given: bigint[] = [];
        for (const id of msg.ids) {
          const held = this.held.get(id);
          if (!held || held.started) continue;
          this.unqueue(held);
          this.held.delete(id);
          held.answered = true;
          given.push(id);
        }
        void this.link!.send({ type: "balanceResponse", ids: given });
        return;
      }
      default:
        this.log(`ignored a ${msg.type} message (not for a worker)`);
    }
  }

  private unqueue(held: Held): void {
    const prefix = prefixOf(held.task.taskId);
    const queue = this.queues.get(prefix);
    if (!queue) return;
    const at = queue.indexOf(held);
    if (at >= 0) queue.splice(at, 1);
    if (queue.length === 0) this.queues.delete(prefix);
  }

  // ---------------------------------------------------------------------------------------------- running tasks
  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Start queued tasks while there is room, one session prefix after the other (clients take turns). */
  private pump(): void {
    while (!this.stopping && this.running < this.concurrency && this.queues.size > 0) {
      const [prefix, queue] = this.queues.entries().next().value as [bigint, Held[]];
      const held = queue.shift()!;
      this.queues.delete(prefix);
      if (queue.length > 0) this.queues.set(prefix, queue); // to the back: the next client's turn
      held.started = true;
      this.running += 1;
      this.outStarted.push(held.task.taskId);
      this.scheduleFlush();
      void this.execute(held, this.epoch);
    }
  }

  private async execute(held: Held, epoch: number): Promise<void> {
    const task = held.task;
    const profile = (task.flags & FLAG_PROFILE) !== 0;
    const began = process.hrtime.bigint();
    const cpuBefore = process.cpuUsage();
    let result: Result;
    let timer: NodeJS.Timeout | undefined;
    try {
      const call = this.prepare(task);
      if (call.failed !== undefined) {
        result = { taskId: task.taskId, status: "failed", payload: utf8(call.failed) };
      } else {
        const work = Promise.resolve().then(() => call.fn!(...call.args!));
        const deadline =
          task.timeoutMs > 0
            ? new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new TimedOut(task.timeoutMs)), task.timeoutMs)))
            : undefined;
        const value = await (deadline ? Promise.race([work, deadline]) : work);
        const ranMs = Number(process.hrtime.bigint() - began) / 1e6;
        if (task.timeoutMs > 0 && ranMs > task.timeoutMs) throw new TimedOut(task.timeoutMs); // a synchronous overrun
        result = { taskId: task.taskId, status: "success", payload: toJson(value) };
      }
    } catch (error) {
      if (error instanceof TimedOut) {
        result = {
          taskId: task.taskId,
          status: "timedOut",
          payload: utf8(`the task ran longer than its timeout of ${error.ms} ms and was abandoned by the TypeScript worker`),
        };
      } else {
        const text = errorText(error);
        result = { taskId: task.taskId, status: "error", payload: encodeErrorPayload(text) };
        if (epoch === this.epoch && !held.answered) this.outErrors.push({ taskId: task.taskId, text });
      }
    } finally {
      clearTimeout(timer);
    }
    if (epoch !== this.epoch || held.answered) return; // cancelled meanwhile, or the session is gone
    if (profile) {
      const cpu = process.cpuUsage(cpuBefore);
      const elapsed = (process.hrtime.bigint() - began) / 1000n;
      result.durationUs = elapsed > 0n ? elapsed : 1n;
      result.peakMemory = 0n;
      result.cpuTimeUs = BigInt(cpu.user + cpu.system);
    }
    this.running -= 1;
    this.answer(held, result);
    this.schedulePump();
  }

  /** The function and arguments of a task, or why the system cannot run it. Throws for the task's own errors. */
  private prepare(task: Task): { fn?: JsonFunction; args?: unknown[]; failed?: string } {
    const fnPayload = this.objects.get(task.functionId);
    if (fnPayload === undefined) return { failed: `object ${hex(task.functionId)} was not sent to this worker` };
    const name = functionName(fnPayload);
    const fn = this.functions[name];
    if (fn === undefined || !Object.prototype.hasOwnProperty.call(this.functions, name)) {
      throw new Error(`unknown function ${name}`);
    }
    const positional: unknown[] = [];
    const keywords: Record<string, unknown> = {};
    let anyKeyword = false;
    for (const [i, arg] of task.args.entries()) {
      let payload: Uint8Array | undefined = arg.payload;
      if (arg.ref !== 0n) {
        payload = this.objects.get(arg.ref);
        if (payload === undefined) return { failed: `object ${hex(arg.ref)} was not sent to this worker` };
      }
      const value = fromJson(payload ?? new Uint8Array(0), `argument ${i}`);
      if (arg.keyword === "") positional.push(value);
      else {
        keywords[arg.keyword] = value;
        anyKeyword = true;
      }
    }
    if (anyKeyword) positional.push(keywords);
    return { fn, args: positional };
  }

  private answer(held: Held, result: Result): void {
    held.answered = true;
    this.held.delete(held.task.taskId);
    this.outResults.push(result);
    this.scheduleFlush();
  }

  /** Send what was produced: tasksStarted, the error texts (taskOutput stream 3), then the results. While quick
   * tasks are about to start, results wait for theirs, at most BATCH_MS: one message then carries many results. */
  private scheduleFlush(): void {
    if (!this.batchOpen) {
      this.batchOpen = true;
      this.firstPendingAt = performance.now();
    }
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.stopping || !this.connected) {
      this.batchOpen = false;
      return;
    }
    if (this.pumpScheduled && this.queues.size > 0 && performance.now() - this.firstPendingAt < BATCH_MS) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
      return;
    }
    this.batchOpen = false;
    const link = this.link!;
    if (this.outStarted.length) void link.send({ type: "tasksStarted", ids: this.outStarted.splice(0) });
    if (this.outErrors.length) {
      const errors = this.outErrors.splice(0);
      void link.send({
        type: "taskOutput",
        taskIds: errors.map((e) => e.taskId),
        streams: errors.map(() => 3),
        texts: errors.map((e) => e.text.slice(0, 16 * 1024)),
      });
    }
    if (this.outResults.length) void link.send({ type: "taskResults", results: this.outResults.splice(0) });
  }
}

function positive(value: number, what: string): number {
  if (!Number.isInteger(value) || value < 1) throw new Error(`${what} must be a whole number >= 1, not ${value}`);
  return value;
}

function errorText(error: unknown): string {
  if (error instanceof Error) return error.stack && error.stack.includes(error.message) ? error.stack : `${error.name}: ${error.message}\n${error.stack ?? ""}`;
  return `thrown: ${(() => {
    try {
      return JSON.stringify(error);
    } catch {
      return String(error);
    }
  })()}`;
}

// ------------------------------------------------------------------------------------------------ CLI
const USAGE = `usage: node worker.js ADDRESS [--capability X]... [--name N] [--queue-capacity N] [--concurrency N]
                      [--heartbeat-interval-ms MS] [--death-timeout-seconds S] [--keys DIR]
A Scaler worker for JSON tasks (capabilities payload=json, lang=ts, plus each --capability).
Registered functions: echo, add, fail, sleep, worker_info.`;

export async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        capability: { type: "string", multiple: true, default: [] },
        name: { type: "string" },
        "queue-capacity": { type: "string" },
        concurrency: { type: "string" },
        "heartbeat-interval-ms": { type: "string" },
        "death-timeout-seconds": { type: "string" },
        keys: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    console.error(`${USAGE}\nerror: ${error instanceof Error ? error.message : String(error)}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals.length !== 1) {
    console.error(`${USAGE}\nerror: expected one ADDRESS, got ${positionals.length}`);
    return 2;
  }
  const number = (text: string | undefined, what: string): number | undefined => {
    if (text === undefined) return undefined;
    const value = Number(text);
    if (!Number.isFinite(value) || value <= 0) throw new Error(`${what} must be a positive number, not ${JSON.stringify(text)}`);
    return value;
  };
  let worker: Worker;
  try {
    const name = values.name;
    const info: JsonFunction = () => ({ name: worker.name, pid: process.pid, hostname: hostname(), lang: "ts" });
    const death = number(values["death-timeout-seconds"], "--death-timeout-seconds");
    worker = new Worker(positionals[0]!, {
      ...(name !== undefined ? { name } : {}),
      capabilities: values.capability as string[],
      queueCapacity: number(values["queue-capacity"], "--queue-capacity"),
      concurrency: number(values.concurrency, "--concurrency"),
      heartbeatIntervalMs: number(values["heartbeat-interval-ms"], "--heartbeat-interval-ms"),
      deathTimeoutMs: death === undefined ? undefined : Math.round(death * 1000),
      functions: { worker_info: info },
      ...(values.keys !== undefined ? { keys: values.keys } : {}),
    });
  } catch (error) {
    console.error(`error: ${error instanceof Error ? error.message : String(error)}`);
    return 2;
  }
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.on(signal, () => {
      worker.log(`received ${signal}: saying disconnect`);
      void worker.stop(0, true, `received ${signal}`);
    });
  }
  return worker.run();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main(process.argv.slice(2)).then(
    (code) => {
      // leave on our own once the socket is gone (libzmq flushes what it holds); exit anyway after 2 s
      process.exitCode = code;
      setTimeout(() => process.exit(code), 2000).unref();
    },
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
