// Scaler wire protocol version 1 (docs/protocol.md): Message headers through the code capnp-es generates from
// src/scaler/protocol/scaler.capnp, little-endian columns, and the payload frames after the header.
import * as $ from "capnp-es";
import * as S from "./gen/scaler.js";

export const PROTOCOL_VERSION = 1;

/** A message that does not decode: the receiver drops it (and says so in its log). */
export class MalformedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MalformedError";
  }
}

export const TaskStatus = {
  success: 0,
  error: 1,
  canceled: 2,
  crashed: 3,
  failed: 4,
  timedOut: 5,
  overMemory: 6,
} as const;
export type TaskStatusName = keyof typeof TaskStatus;
export const STATUS_NAMES: readonly TaskStatusName[] = [
  "success",
  "error",
  "canceled",
  "crashed",
  "failed",
  "timedOut",
  "overMemory",
];

export const ERROR_CODES = ["malformed", "notConnected", "badRequest", "protected", "tooLarge"] as const;
export type ErrorCodeName = (typeof ERROR_CODES)[number];

export const FLAG_PROFILE = 1;
export const FLAG_SILENT = 2;
export const FLAG_STREAM_OUTPUT = 4;

// ------------------------------------------------------------------------------------------------ columns
export function u64Column(values: readonly bigint[]): Uint8Array {
  const out = new Uint8Array(values.length * 8);
  const view = new DataView(out.buffer);
  values.forEach((value, i) => view.setBigUint64(i * 8, value, true));
  return out;
}

export function u32Column(values: readonly number[]): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  values.forEach((value, i) => view.setUint32(i * 4, value, true));
  return out;
}

export function u16Column(values: readonly number[]): Uint8Array {
  const out = new Uint8Array(values.length * 2);
  const view = new DataView(out.buffer);
  values.forEach((value, i) => view.setUint16(i * 2, value, true));
  return out;
}

export function u8Column(values: readonly number[]): Uint8Array {
  return Uint8Array.from(values);
}

function viewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function checkLength(bytes: Uint8Array, width: number, what: string, count?: number): number {
  if (bytes.byteLength % width !== 0) {
    throw new MalformedError(`${what}: ${bytes.byteLength} bytes is not a whole number of ${width}-byte values`);
  }
  const n = bytes.byteLength / width;
  if (count !== undefined && n !== count) {
    throw new MalformedError(`${what}: ${n} values, expected ${count}`);
  }
  return n;
}

export function readU64(bytes: Uint8Array, what: string, count?: number): bigint[] {
  const n = checkLength(bytes, 8, what, count);
  const view = viewOf(bytes);
  const out = new Array<bigint>(n);
  for (let i = 0; i < n; i++) out[i] = view.getBigUint64(i * 8, true);
  return out;
}

/** u64 values that are sizes or counts: as numbers (a size beyond 2**53 cannot exist in memory anyway). */
export function readU64Numbers(bytes: Uint8Array, what: string, count?: number): number[] {
  return readU64(bytes, what, count).map((value) => {
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new MalformedError(`${what}: value ${value} is too large`);
    return Number(value);
  });
}

export function readU32(bytes: Uint8Array, what: string, count?: number): number[] {
  const n = checkLength(bytes, 4, what, count);
  const view = viewOf(bytes);
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = view.getUint32(i * 4, true);
  return out;
}

export function readI32(bytes: Uint8Array, what: string, count?: number): number[] {
  const n = checkLength(bytes, 4, what, count);
  const view = viewOf(bytes);
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = view.getInt32(i * 4, true);
  return out;
}

export function readU16(bytes: Uint8Array, what: string, count?: number): number[] {
  const n = checkLength(bytes, 2, what, count);
  const view = viewOf(bytes);
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = view.getUint16(i * 2, true);
  return out;
}

export function readU8(bytes: Uint8Array, what: string, count?: number): number[] {
  checkLength(bytes, 1, what, count);
  return Array.from(bytes);
}

/** An optional column: empty means "every item has the default". */
function optional<T>(values: T[], count: number, fallback: T, what: string): T[] {
  if (values.length === 0) return new Array<T>(count).fill(fallback);
  if (values.length !== count) throw new MalformedError(`${what}: ${values.length} values, expected ${count}`);
  return values;
}

// ------------------------------------------------------------------------------------------------ payload frames
/** No frame sent to the scheduler may be bigger (docs/protocol.md section 2): ZeroMQ drops the connection of a peer
 * that starts one. A bigger payload spans frames; headers and packs of small payloads must fit in one. */
export const MAX_FRAME = 1 << 20;
const ALONE_FROM = 64 * 1024; // payloads this big travel in frames of their own

/** A message this peer would send has a header bigger than MAX_FRAME, even alone in its batch. */
export class FrameLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FrameLimitError";
  }
}

/** The payloads of a batch, walked over the frames after the header exactly as docs/protocol.md section 2 says: a
 * payload within the rest of its frame, or (not fitting there) starting a frame and filling whole frames, joined. */
export function walkPayloads(sizes: readonly number[], frames: readonly Uint8Array[]): Uint8Array[] {
  const out: Uint8Array[] = [];
  let frame = 0;
  let offset = 0;
  sizes.forEach((size, k) => {
    if (size === 0) {
      out.push(new Uint8Array(0));
      return;
    }
    while (frame < frames.length && offset === frames[frame]!.byteLength) {
      frame += 1;
      offset = 0;
    }
    if (frame === frames.length) throw new MalformedError(`payload frames: payload ${k} (${size} bytes) is missing`);
    const current = frames[frame]!;
    if (current.byteLength - offset >= size) {
      out.push(current.subarray(offset, offset + size));
      offset += size;
      return;
    }
    if (offset !== 0) {
      throw new MalformedError(`payload frames: payload ${k} (${size} bytes) starts inside frame ${frame} and does not fit in it`);
    }
    let end = frame;
    let total = 0;
    while (total < size && end < frames.length) total += frames[end++]!.byteLength;
    if (total !== size) {
      throw new MalformedError(
        `payload frames: payload ${k} (${size} bytes) spans frames ${frame} to ${end - 1}, which hold ${total} bytes`,
      );
    }
    out.push(Buffer.concat(frames.slice(frame, end), size));
    frame = end - 1;
    offset = frames[frame]!.byteLength;
  });
  while (frame < frames.length && offset === frames[frame]!.byteLength) {
    frame += 1;
    offset = 0;
  }
  if (frame !== frames.length) throw new MalformedError("payload frames: bytes left over after the last payload");
  return out;
}

/** The frames of a payload bigger than MAX_FRAME: pieces of MAX_FRAME bytes, the last one shorter (views). */
export function cutPayload(payload: Uint8Array): Uint8Array[] {
  if (payload.byteLength <= MAX_FRAME) return payload.byteLength ? [payload] : [];
  const pieces: Uint8Array[] = [];
  for (let at = 0; at < payload.byteLength; at += MAX_FRAME) pieces.push(payload.subarray(at, at + MAX_FRAME));
  return pieces;
}

/** Payload frames for the given payloads, none bigger than MAX_FRAME: each big one in frames of its own (from
 * 64 KiB; over 1 MiB cut in pieces of 1 MiB), runs of small ones packed up to 1 MiB, empty ones take no bytes. */
export function packPayloads(payloads: readonly Uint8Array[]): Uint8Array[] {
  const frames: Uint8Array[] = [];
  let run: Uint8Array[] = [];
  let runBytes = 0;
  const flush = (): void => {
    if (run.length === 1) frames.push(run[0]!);
    else if (run.length > 1) frames.push(Buffer.concat(run, runBytes));
    run = [];
    runBytes = 0;
  };
  for (const payload of payloads) {
    if (payload.byteLength === 0) continue;
    if (payload.byteLength >= ALONE_FROM) {
      flush();
      frames.push(...cutPayload(payload));
      continue;
    }
    if (runBytes + payload.byteLength > MAX_FRAME) flush();
    run.push(payload);
    runBytes += payload.byteLength;
  }
  flush();
  return frames;
}

// ------------------------------------------------------------------------------------------------ message types
export interface Argument {
  ref: bigint; // 0n: inline, its value is `payload`
  keyword: string; // "" for a positional argument
  payload?: Uint8Array;
}

export interface Task {
  taskId: bigint;
  functionId: bigint;
  flags: number;
  args: Argument[];
  timeoutMs: number; // 0: no limit
  retries: number;
  priority: number;
  requires: string[]; // capabilities the task requires (submitTasks)
  idempotencyKey?: string; // submitTasks: a task sent later with the same key gets this one's result ("" or absent: none)
}

export interface Result {
  taskId: bigint;
  status: TaskStatusName;
  payload: Uint8Array;
  durationUs?: bigint;
  peakMemory?: bigint;
  cpuTimeUs?: bigint;
}

export interface StoredObject {
  objectId: bigint;
  name: string;
  payload: Uint8Array;
}

const PEER_KINDS = {
  client: S.PeerKind.CLIENT,
  worker: S.PeerKind.WORKER,
  monitor: S.PeerKind.MONITOR,
  manager: S.PeerKind.MANAGER,
} as const;
export type PeerKindName = keyof typeof PEER_KINDS;
const PEER_KIND_NAMES = Object.keys(PEER_KINDS) as PeerKindName[];

export interface HelloFields {
  kind: PeerKindName;
  name: string;
  hostname: string;
  pid: number;
  heartbeatIntervalMs: number;
  queueCapacity: number;
  capabilities: string[];
  protocolVersion?: number;
  unit?: string; // workers a worker manager started: the unit it started them in ("" or absent: none)
}

/** A worker manager's state (docs/protocol.md section 6, "managerReport"; section 8, "Worker managers"). */
export interface ManagerReportFields {
  minUnits: number;
  maxUnits: number;
  workersPerUnit: number;
  slotsPerWorker: number;
  tier: number;
  idleMs: bigint;
  startTimeoutMs: bigint;
  units: string[];
  ended: string[];
  reason: string;
}

export interface HeartbeatFields {
  cpuPercent?: number;
  rssBytes?: bigint;
  lagUs?: bigint;
  queued?: number;
  running?: number;
  processorCpuPercent?: number;
  processorRssBytes?: bigint;
  processors?: number;
  blockedProcessors?: number;
  waitingTasks?: number;
}

export type IdListKind =
  | "cancelTasks"
  | "freeObjects"
  | "balanceRequest"
  | "balanceResponse"
  | "tasksStarted"
  | "explainTasks";
export type ReasonKind = "disconnect" | "shutdownRequest";

export type Msg =
  | ({ type: "hello" } & HelloFields)
  | {
      type: "welcome";
      protocolVersion: number;
      idPrefix: number;
      schedulerName: string;
      protected: boolean;
      peerTimeoutMs: number;
      maxPayloadBytes: bigint;
    }
  | { type: "refused"; reason: string; schedulerProtocolVersion: number; keyProblem: boolean }
  | ({ type: "heartbeat" } & HeartbeatFields)
  | { type: "heartbeatEcho" }
  | { type: "submitTasks" | "dispatchTasks"; tasks: Task[] }
  | { type: "taskResults"; results: Result[] }
  | { type: IdListKind; ids: bigint[] }
  | { type: "putObjects"; objects: StoredObject[] }
  | { type: ReasonKind; reason: string }
  | { type: "shutdown"; reason: string; workersStay?: boolean }
  | { type: "error"; code: ErrorCodeName; message: string; ids: bigint[] }
  | { type: "taskOutput"; taskIds: bigint[]; streams: number[]; texts: string[] }
  | ({ type: "managerReport" } & ManagerReportFields)
  | { type: "scaleUnits"; start: string[]; stop: string[]; reason: string }
  | { type: "taskExplanations"; taskIds: bigint[]; texts: string[] }
  | { type: "status" };


// ------------------------------------------------------------------------------------------------ encoding
function setData(init: (length: number) => $.Data, bytes: Uint8Array): void {
  if (bytes.byteLength > 0) init(bytes.byteLength).copyBuffer(bytes);
}

function setTexts(init: (length: number) => $.List<string>, texts: readonly string[]): void {
  if (texts.length === 0) return;
  const list = init(texts.length);
  texts.forEach((text, i) => list.set(i, text));
}

function readTexts(list: $.List<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < list.length; i++) out.push(list.get(i));
  return out;
}

function fillTaskBatch(batch: S.TaskBatch, tasks: readonly Task[]): Uint8Array[] {
  const args = tasks.flatMap((task) => task.args);
  const payloads = args.filter((arg) => arg.ref === 0n).map((arg) => arg.payload ?? new Uint8Array(0));
  setData((l) => batch._initTaskIds(l), u64Column(tasks.map((task) => task.taskId)));
  setData((l) => batch._initFunctionIds(l), u64Column(tasks.map((task) => task.functionId)));
  setData((l) => batch._initFlags(l), u8Column(tasks.map((task) => task.flags)));
  setData((l) => batch._initArgCounts(l), u16Column(tasks.map((task) => task.args.length)));
  setData((l) => batch._initArgRefs(l), u64Column(args.map((arg) => arg.ref)));
  if (args.some((arg) => arg.keyword !== "")) {
    setTexts((l) => batch._initKeywords(l), args.map((arg) => arg.keyword));
  }
  setData((l) => batch._initPayloadSizes(l), u64Column(payloads.map((payload) => BigInt(payload.byteLength))));
  if (tasks.some((task) => task.timeoutMs !== 0)) {
    setData((l) => batch._initTimeoutsMs(l), u32Column(tasks.map((task) => task.timeoutMs)));
  }
  if (tasks.some((task) => task.retries !== 0)) {
    setData((l) => batch._initRetries(l), u8Column(tasks.map((task) => task.retries)));
  }
  if (tasks.some((task) => task.priority !== 0)) {
    const priorities = new Uint8Array(tasks.length * 4);
    const view = new DataView(priorities.buffer);
    tasks.forEach((task, i) => view.setInt32(i * 4, task.priority, true));
    setData((l) => batch._initPriorities(l), priorities);
  }
  if (tasks.some((task) => task.requires.length > 0)) {
    const distinct = new Map<string, number>();
    const index = tasks.map((task) => {
      const key = JSON.stringify(task.requires);
      let at = distinct.get(key);
      if (at === undefined) {
        at = distinct.size;
        distinct.set(key, at);
      }
      return at;
    });
    const requirements = batch._initRequirements(distinct.size);
    for (const [key, at] of distinct) {
      setTexts((l) => requirements.get(at)._initCapabilities(l), JSON.parse(key) as string[]);
    }
    if (distinct.size > 1) setData((l) => batch._initRequirementIndex(l), u16Column(index));
  }
  if (tasks.some((task) => task.idempotencyKey)) {
    setTexts((l) => batch._initIdempotencyKeys(l), tasks.map((task) => task.idempotencyKey ?? ""));
  }
  return payloads;
}

function fillResultBatch(batch: S.ResultBatch, results: readonly Result[]): Uint8Array[] {
  setData((l) => batch._initTaskIds(l), u64Column(results.map((result) => result.taskId)));
  setData((l) => batch._initStatuses(l), u8Column(results.map((result) => TaskStatus[result.status])));
  if (results.some((result) => result.durationUs !== undefined)) {
    setData((l) => batch._initDurationsUs(l), u64Column(results.map((result) => result.durationUs ?? 0n)));
    setData((l) => batch._initPeakMemory(l), u64Column(results.map((result) => result.peakMemory ?? 0n)));
    setData((l) => batch._initCpuTimesUs(l), u64Column(results.map((result) => result.cpuTimeUs ?? 0n)));
  }
  setData((l) => batch._initPayloadSizes(l), u64Column(results.map((result) => BigInt(result.payload.byteLength))));
  return results.map((result) => result.payload);
}

/** The frames of a message: its header, then its payload frames. */
export function encode(msg: Msg): Uint8Array[] {
  const message = new $.Message();
  const root = message.initRoot(S.Message);
  let payloads: Uint8Array[] = [];
  switch (msg.type) {
    case "hello": {
      const hello = root._initHello();
      hello.protocolVersion = msg.protocolVersion ?? PROTOCOL_VERSION;
      hello.kind = PEER_KINDS[msg.kind];
      hello.name = msg.name;
      hello.hostname = msg.hostname;
      hello.pid = msg.pid;
      hello.heartbeatIntervalMs = msg.heartbeatIntervalMs;
      hello.queueCapacity = msg.queueCapacity;
      setTexts((l) => hello._initCapabilities(l), msg.capabilities);
      hello.unit = msg.unit ?? "";
      break;
    }
    case "heartbeat": {
      const beat = root._initHeartbeat();
      beat.cpuPercent = msg.cpuPercent ?? 0;
      beat.rssBytes = msg.rssBytes ?? 0n;
      beat.lagUs = msg.lagUs ?? 0n;
      beat.queued = msg.queued ?? 0;
      beat.running = msg.running ?? 0;
      beat.processorCpuPercent = msg.processorCpuPercent ?? 0;
      beat.processorRssBytes = msg.processorRssBytes ?? 0n;
      beat.processors = msg.processors ?? 0;
      beat.blockedProcessors = msg.blockedProcessors ?? 0;
      beat.waitingTasks = msg.waitingTasks ?? 0;
      break;
    }
    case "submitTasks":
      payloads = fillTaskBatch(root._initSubmitTasks(), msg.tasks);
      break;
    case "dispatchTasks":
      payloads = fillTaskBatch(root._initDispatchTasks(), msg.tasks);
      break;
    case "taskResults":
      payloads = fillResultBatch(root._initTaskResults(), msg.results);
      break;
    case "putObjects": {
      const batch = root._initPutObjects();
      setData((l) => batch._initObjectIds(l), u64Column(msg.objects.map((object) => object.objectId)));
      if (msg.objects.some((object) => object.name !== "")) {
        setTexts((l) => batch._initNames(l), msg.objects.map((object) => object.name));
      }
      payloads = msg.objects.map((object) => object.payload);
      setData((l) => batch._initPayloadSizes(l), u64Column(payloads.map((payload) => BigInt(payload.byteLength))));
      break;
    }
    case "cancelTasks":
      {
        const list = root._initCancelTasks();
        setData((l) => list._initIds(l), u64Column(msg.ids));
      }
      break;
    case "freeObjects":
      {
        const list = root._initFreeObjects();
        setData((l) => list._initIds(l), u64Column(msg.ids));
      }
      break;
    case "balanceRequest":
      {
        const list = root._initBalanceRequest();
        setData((l) => list._initIds(l), u64Column(msg.ids));
      }
      break;
    case "balanceResponse":
      {
        const list = root._initBalanceResponse();
        setData((l) => list._initIds(l), u64Column(msg.ids));
      }
      break;
    case "tasksStarted":
      {
        const list = root._initTasksStarted();
        setData((l) => list._initIds(l), u64Column(msg.ids));
      }
      break;
    case "explainTasks":
      {
        const list = root._initExplainTasks();
        setData((l) => list._initIds(l), u64Column(msg.ids));
      }
      break;
    case "taskExplanations": {
      const answer = root._initTaskExplanations();
      setData((l) => answer._initTaskIds(l), u64Column(msg.taskIds));
      setTexts((l) => answer._initTexts(l), msg.texts);
      break;
    }
    case "disconnect":
      root._initDisconnect().reason = msg.reason;
      break;
    case "shutdownRequest":
      root._initShutdownRequest().reason = msg.reason;
      break;
    case "shutdown": {
      const shutdown = root._initShutdown();
      shutdown.reason = msg.reason;
      shutdown.workersStay = msg.workersStay ?? false;
      break;
    }
    case "taskOutput": {
      const output = root._initTaskOutput();
      setData((l) => output._initTaskIds(l), u64Column(msg.taskIds));
      setData((l) => output._initStreams(l), u8Column(msg.streams));
      setTexts((l) => output._initTexts(l), msg.texts);
      break;
    }
    case "managerReport": {
      const report = root._initManagerReport();
      report.minUnits = msg.minUnits;
      report.maxUnits = msg.maxUnits;
      report.workersPerUnit = msg.workersPerUnit;
      report.slotsPerWorker = msg.slotsPerWorker;
      report.tier = msg.tier;
      report.idleMs = msg.idleMs;
      report.startTimeoutMs = msg.startTimeoutMs;
      setTexts((l) => report._initUnits(l), msg.units);
      setTexts((l) => report._initEnded(l), msg.ended);
      report.reason = msg.reason;
      break;
    }
    case "scaleUnits": {
      const scale = root._initScaleUnits();
      setTexts((l) => scale._initStart(l), msg.start);
      setTexts((l) => scale._initStop(l), msg.stop);
      scale.reason = msg.reason;
      break;
    }
    default:
      throw new Error(`encoding ${msg.type} is not supported by this peer`);
  }
  const header = new Uint8Array(message.toArrayBuffer());
  if (header.byteLength > MAX_FRAME) {
    throw new FrameLimitError(`a ${msg.type} header of ${header.byteLength} bytes is over the 1 MiB frame limit`);
  }
  return [header, ...packPayloads(payloads)];
}

/** The messages (each: header, then payload frames) that carry `msg`: itself, or, when its header would pass
 * MAX_FRAME, its batch cut in halves (in order) until every header fits. FrameLimitError if one item alone does not. */
export function encodeMessages(msg: Msg): Uint8Array[][] {
  try {
    return [encode(msg)];
  } catch (error) {
    const parts = error instanceof FrameLimitError ? halves(msg) : undefined;
    if (parts === undefined) throw error;
    return parts.flatMap(encodeMessages);
  }
}

function halves(msg: Msg): [Msg, Msg] | undefined {
  const split = <T>(items: readonly T[]): [T[], T[]] | undefined =>
    items.length < 2 ? undefined : [items.slice(0, items.length >> 1), items.slice(items.length >> 1)];
  switch (msg.type) {
    case "submitTasks":
    case "dispatchTasks": {
      const parts = split(msg.tasks);
      return parts && [{ ...msg, tasks: parts[0] }, { ...msg, tasks: parts[1] }];
    }
    case "taskResults": {
      const parts = split(msg.results);
      return parts && [{ ...msg, results: parts[0] }, { ...msg, results: parts[1] }];
    }
    case "putObjects": {
      const parts = split(msg.objects);
      return parts && [{ ...msg, objects: parts[0] }, { ...msg, objects: parts[1] }];
    }
    case "cancelTasks":
    case "freeObjects":
    case "tasksStarted": {
      // (not balanceResponse: one answers each balanceRequest, and lists a subset of its ids: it fits as the request did)
      const parts = split(msg.ids);
      return parts && [{ ...msg, ids: parts[0] }, { ...msg, ids: parts[1] }];
    }
    case "taskOutput": {
      const half = msg.taskIds.length >> 1;
      if (half === 0) return undefined;
      const part = (from: number, to?: number): Msg => ({
        type: "taskOutput",
        taskIds: msg.taskIds.slice(from, to),
        streams: msg.streams.slice(from, to),
        texts: msg.texts.slice(from, to),
      });
      return [part(0, half), part(half)];
    }
    default:
      return undefined;
  }
}

// ------------------------------------------------------------------------------------------------ decoding
function bytesOf(data: $.Data): Uint8Array {
  return data.length === 0 ? new Uint8Array(0) : data.toUint8Array();
}

function decodeTaskBatch(batch: S.TaskBatch, frames: readonly Uint8Array[]): Task[] {
  const taskIds = readU64(bytesOf(batch.taskIds), "taskIds");
  const n = taskIds.length;
  const functionIds = readU64(bytesOf(batch.functionIds), "functionIds", n);
  const flags = readU8(bytesOf(batch.flags), "flags", n);
  const argCounts = readU16(bytesOf(batch.argCounts), "argCounts", n);
  const totalArgs = argCounts.reduce((a, b) => a + b, 0);
  const argRefs = readU64(bytesOf(batch.argRefs), "argRefs", totalArgs);
  const keywords = optional(readTexts(batch.keywords), totalArgs, "", "keywords");
  const inline = argRefs.filter((ref) => ref === 0n).length;
  const sizes = readU64Numbers(bytesOf(batch.payloadSizes), "payloadSizes", inline);
  const payloads = walkPayloads(sizes, frames);
  const timeouts = optional(readU32(bytesOf(batch.timeoutsMs), "timeoutsMs"), n, 0, "timeoutsMs");
  const retries = optional(readU8(bytesOf(batch.retries), "retries"), n, 0, "retries");
  const priorities = optional(readI32(bytesOf(batch.priorities), "priorities"), n, 0, "priorities");
  const requirements: string[][] = [];
  const reqList = batch.requirements;
  for (let i = 0; i < reqList.length; i++) requirements.push(readTexts(reqList.get(i).capabilities));
  const reqIndex =
    requirements.length === 0
      ? new Array<number>(n).fill(-1)
      : optional(readU16(bytesOf(batch.requirementIndex), "requirementIndex"), n, 0, "requirementIndex");
  const keys = optional(readTexts(batch.idempotencyKeys), n, "", "idempotencyKeys");
  const tasks: Task[] = [];
  let argAt = 0;
  let payloadAt = 0;
  for (let k = 0; k < n; k++) {
    const args: Argument[] = [];
    for (let j = 0; j < argCounts[k]!; j++, argAt++) {
      const ref = argRefs[argAt]!;
      const arg: Argument = { ref, keyword: keywords[argAt]! };
      if (ref === 0n) arg.payload = payloads[payloadAt++]!;
      args.push(arg);
    }
    const at = reqIndex[k]!;
    if (at >= requirements.length) throw new MalformedError(`requirementIndex: ${at} is out of range`);
    const task: Task = {
      taskId: taskIds[k]!,
      functionId: functionIds[k]!,
      flags: flags[k]!,
      args,
      timeoutMs: timeouts[k]!,
      retries: retries[k]!,
      priority: priorities[k]!,
      requires: at < 0 ? [] : requirements[at]!,
    };
    if (keys[k]) task.idempotencyKey = keys[k]!;
    tasks.push(task);
  }
  return tasks;
}

function decodeResultBatch(batch: S.ResultBatch, frames: readonly Uint8Array[]): Result[] {
  const taskIds = readU64(bytesOf(batch.taskIds), "taskIds");
  const n = taskIds.length;
  const statuses = readU8(bytesOf(batch.statuses), "statuses", n);
  const durations = readU64(bytesOf(batch.durationsUs), "durationsUs");
  const peaks = readU64(bytesOf(batch.peakMemory), "peakMemory");
  const cpus = readU64(bytesOf(batch.cpuTimesUs), "cpuTimesUs");
  const sizes = readU64Numbers(bytesOf(batch.payloadSizes), "payloadSizes", n);
  const payloads = walkPayloads(sizes, frames);
  for (const [column, what] of [
    [durations, "durationsUs"],
    [peaks, "peakMemory"],
    [cpus, "cpuTimesUs"],
  ] as const) {
    if (column.length !== 0 && column.length !== n) throw new MalformedError(`${what}: ${column.length} values, expected ${n}`);
  }
  return taskIds.map((taskId, k) => {
    const status = STATUS_NAMES[statuses[k]!];
    if (status === undefined) throw new MalformedError(`statuses: unknown status ${statuses[k]}`);
    const result: Result = { taskId, status, payload: payloads[k]! };
    if (durations.length) result.durationUs = durations[k]!;
    if (peaks.length) result.peakMemory = peaks[k]!;
    if (cpus.length) result.cpuTimeUs = cpus[k]!;
    return result;
  });
}

function noFrames(frames: readonly Uint8Array[], what: string): void {
  if (frames.length !== 0) throw new MalformedError(`${what} carries ${frames.length} payload frame(s)`);
}

/** The message in the given frames (header first). Throws MalformedError. */
export function decode(allFrames: readonly Uint8Array[]): Msg {
  if (allFrames.length === 0) throw new MalformedError("no header frame");
  const frames = allFrames.slice(1);
  try {
    const message = new $.Message(allFrames[0]!, false);
    const root = message.getRoot(S.Message);
    const which = root.which();
    switch (which) {
      case S.Message.HELLO: {
        noFrames(frames, "hello");
        const hello = root.hello;
        const kind = PEER_KIND_NAMES.find((name) => PEER_KINDS[name] === hello.kind);
        if (kind === undefined) throw new MalformedError(`hello: unknown peer kind ${hello.kind}`);
        return {
          type: "hello",
          protocolVersion: hello.protocolVersion,
          kind,
          name: hello.name,
          hostname: hello.hostname,
          pid: hello.pid,
          heartbeatIntervalMs: hello.heartbeatIntervalMs,
          queueCapacity: hello.queueCapacity,
          capabilities: readTexts(hello.capabilities),
          unit: hello.unit,
        };
      }
      case S.Message.WELCOME: {
        noFrames(frames, "welcome");
        const w = root.welcome;
        return {
          type: "welcome",
          protocolVersion: w.protocolVersion,
          idPrefix: w.idPrefix,
          schedulerName: w.schedulerName,
          protected: w.protected,
          peerTimeoutMs: w.peerTimeoutMs,
          maxPayloadBytes: w.maxPayloadBytes,
        };
      }
      case S.Message.REFUSED: {
        noFrames(frames, "refused");
        const r = root.refused;
        return {
          type: "refused",
          reason: r.reason,
          schedulerProtocolVersion: r.schedulerProtocolVersion,
          keyProblem: r.keyProblem,
        };
      }
      case S.Message.HEARTBEAT:
        noFrames(frames, "heartbeat");
        return { type: "heartbeat", ...heartbeatFields(root.heartbeat) };
      case S.Message.HEARTBEAT_ECHO:
        noFrames(frames, "heartbeatEcho");
        return { type: "heartbeatEcho" };
      case S.Message.SUBMIT_TASKS:
        return { type: "submitTasks", tasks: decodeTaskBatch(root.submitTasks, frames) };
      case S.Message.DISPATCH_TASKS:
        return { type: "dispatchTasks", tasks: decodeTaskBatch(root.dispatchTasks, frames) };
      case S.Message.TASK_RESULTS:
        return { type: "taskResults", results: decodeResultBatch(root.taskResults, frames) };
      case S.Message.PUT_OBJECTS: {
        const batch = root.putObjects;
        const ids = readU64(bytesOf(batch.objectIds), "objectIds");
        const names = optional(readTexts(batch.names), ids.length, "", "names");
        const sizes = readU64Numbers(bytesOf(batch.payloadSizes), "payloadSizes", ids.length);
        const payloads = walkPayloads(sizes, frames);
        return {
          type: "putObjects",
          objects: ids.map((objectId, i) => ({ objectId, name: names[i]!, payload: payloads[i]! })),
        };
      }
      case S.Message.CANCEL_TASKS:
        return idList("cancelTasks", root.cancelTasks, frames);
      case S.Message.FREE_OBJECTS:
        return idList("freeObjects", root.freeObjects, frames);
      case S.Message.BALANCE_REQUEST:
        return idList("balanceRequest", root.balanceRequest, frames);
      case S.Message.BALANCE_RESPONSE:
        return idList("balanceResponse", root.balanceResponse, frames);
      case S.Message.TASKS_STARTED:
        return idList("tasksStarted", root.tasksStarted, frames);
      case S.Message.EXPLAIN_TASKS:
        return idList("explainTasks", root.explainTasks, frames);
      case S.Message.TASK_EXPLANATIONS: {
        noFrames(frames, "taskExplanations");
        const answer = root.taskExplanations;
        const taskIds = readU64(bytesOf(answer.taskIds), "taskIds");
        const texts = readTexts(answer.texts);
        if (texts.length !== taskIds.length) throw new MalformedError("taskExplanations: texts and taskIds differ in length");
        return { type: "taskExplanations", taskIds, texts };
      }
      case S.Message.DISCONNECT:
        noFrames(frames, "disconnect");
        return { type: "disconnect", reason: root.disconnect.reason };
      case S.Message.SHUTDOWN_REQUEST:
        noFrames(frames, "shutdownRequest");
        return { type: "shutdownRequest", reason: root.shutdownRequest.reason };
      case S.Message.SHUTDOWN:
        noFrames(frames, "shutdown");
        return { type: "shutdown", reason: root.shutdown.reason, workersStay: root.shutdown.workersStay };
      case S.Message.ERROR: {
        noFrames(frames, "error");
        const e = root.error;
        const code = ERROR_CODES[e.code];
        if (code === undefined) throw new MalformedError(`error: unknown code ${e.code}`);
        return { type: "error", code, message: e.message, ids: readU64(bytesOf(e.ids), "ids") };
      }
      case S.Message.TASK_OUTPUT: {
        noFrames(frames, "taskOutput");
        const o = root.taskOutput;
        const taskIds = readU64(bytesOf(o.taskIds), "taskIds");
        const streams = readU8(bytesOf(o.streams), "streams", taskIds.length);
        const texts = readTexts(o.texts);
        if (texts.length !== taskIds.length) throw new MalformedError("taskOutput: texts and taskIds differ in length");
        return { type: "taskOutput", taskIds, streams, texts };
      }
      case S.Message.MANAGER_REPORT: {
        noFrames(frames, "managerReport");
        const r = root.managerReport;
        return {
          type: "managerReport",
          minUnits: r.minUnits,
          maxUnits: r.maxUnits,
          workersPerUnit: r.workersPerUnit,
          slotsPerWorker: r.slotsPerWorker,
          tier: r.tier,
          idleMs: r.idleMs,
          startTimeoutMs: r.startTimeoutMs,
          units: readTexts(r.units),
          ended: readTexts(r.ended),
          reason: r.reason,
        };
      }
      case S.Message.SCALE_UNITS: {
        noFrames(frames, "scaleUnits");
        const u = root.scaleUnits;
        return { type: "scaleUnits", start: readTexts(u.start), stop: readTexts(u.stop), reason: u.reason };
      }
      case S.Message.STATUS:
        return { type: "status" };
      default:
        throw new MalformedError(`unknown message kind ${which as number}`);
    }
  } catch (error) {
    if (error instanceof MalformedError) throw error;
    throw new MalformedError(`header does not decode: ${error instanceof Error ? error.message : String(error)}`);
  }
}

function idList(type: IdListKind, list: S.IdList, frames: readonly Uint8Array[]): Msg {
  noFrames(frames, type);
  return { type, ids: readU64(bytesOf(list.ids), "ids") };
}

function heartbeatFields(beat: S.Heartbeat): HeartbeatFields {
  return {
    cpuPercent: beat.cpuPercent,
    rssBytes: beat.rssBytes,
    lagUs: beat.lagUs,
    queued: beat.queued,
    running: beat.running,
    processorCpuPercent: beat.processorCpuPercent,
    processorRssBytes: beat.processorRssBytes,
    processors: beat.processors,
    blockedProcessors: beat.blockedProcessors,
    waitingTasks: beat.waitingTasks,
  };
}

// ------------------------------------------------------------------------------------------------ helpers
/** The session prefix of an id (its upper 24 bits). */
export function prefixOf(id: bigint): bigint {
  return id >> 40n;
}

export function hex(id: bigint): string {
  return `0x${id.toString(16)}`;
}

/** The `error` payload of the JSON convention (and of Python's): u32 little-endian length, then the UTF-8 text. */
export function encodeErrorPayload(text: string): Uint8Array {
  const body = Buffer.from(text, "utf8");
  const out = Buffer.alloc(4 + body.byteLength);
  out.writeUInt32LE(body.byteLength, 0);
  body.copy(out, 4);
  return out;
}

/** The text of an `error` payload (Python's may carry a pickled exception after the text: ignored). */
export function decodeErrorPayload(payload: Uint8Array): string {
  if (payload.byteLength < 4) return Buffer.from(payload).toString("utf8");
  const length = viewOf(payload).getUint32(0, true);
  if (4 + length > payload.byteLength) return Buffer.from(payload).toString("utf8");
  return Buffer.from(payload.subarray(4, 4 + length)).toString("utf8");
}

export function utf8(text: string): Uint8Array {
  return Buffer.from(text, "utf8");
}

export function text(payload: Uint8Array): string {
  return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString("utf8");
}
