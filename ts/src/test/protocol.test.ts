// Unit tests of the codec: the payload frame walk, columns, the golden messages of tests/protocol/golden, round trips.
// Run: node --test ts/dist/test/   (after the build)
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  cutPayload,
  decode,
  decodeErrorPayload,
  encode,
  encodeErrorPayload,
  encodeMessages,
  FrameLimitError,
  MalformedError,
  MAX_FRAME,
  packPayloads,
  readU16,
  readU64,
  STATUS_NAMES,
  u16Column,
  u64Column,
  walkPayloads,
  type Msg,
  type Task,
} from "../protocol.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "tests", "protocol", "golden");
const bytes = (hex: string): Uint8Array => Uint8Array.from(Buffer.from(hex, "hex"));
const hexOf = (data: Uint8Array): string => Buffer.from(data).toString("hex");

test("the frame walk takes every valid layout", () => {
  const a = bytes("61");
  const bc = bytes("6263");
  // all in one frame, one per frame, with empty frames around, an empty payload taking no bytes
  assert.deepEqual(walkPayloads([1, 0, 2], [bytes("616263")]).map(hexOf), ["61", "", "6263"]);
  assert.deepEqual(walkPayloads([1, 2], [a, bc]).map(hexOf), ["61", "6263"]);
  assert.deepEqual(walkPayloads([1, 2], [new Uint8Array(0), a, new Uint8Array(0), bc, new Uint8Array(0)]).map(hexOf), [
    "61",
    "6263",
  ]);
  assert.deepEqual(walkPayloads([0, 0], []).map(hexOf), ["", ""]);
  assert.deepEqual(walkPayloads([], [new Uint8Array(0)]), []);
});

test("the frame walk refuses payloads that miss bytes, leave bytes over or span frames they do not fill", () => {
  assert.throws(() => walkPayloads([3], [bytes("6162")]), MalformedError); // missing bytes
  assert.throws(() => walkPayloads([1], []), MalformedError); // no frame
  assert.throws(() => walkPayloads([1], [bytes("6162")]), MalformedError); // a byte left over
  assert.throws(() => walkPayloads([1], [bytes("61"), bytes("62")]), MalformedError); // a frame left over
  assert.throws(() => walkPayloads([], [bytes("61")]), MalformedError);
  // a payload that does not fit in the rest of its frame must start a frame and fill whole frames
  assert.throws(() => walkPayloads([1, 5], [bytes("61626364"), bytes("6566")]), /starts inside frame 0/); // starts inside
  assert.throws(() => walkPayloads([5], [bytes("616263"), bytes("64656667")]), /spans frames 0 to 1, which hold 7/); // ends inside
  assert.throws(() => walkPayloads([5], [bytes("616263"), bytes("64")]), /which hold 4 bytes/); // missing bytes
  assert.throws(() => walkPayloads([5, 1], [bytes("616263"), bytes("6465")]), /payload 1 \(1 bytes\) is missing/);
  assert.throws(() => walkPayloads([5], [bytes("616263"), bytes("6465"), bytes("66")]), /left over/); // a frame too many
});

test("a payload that starts a frame and fills whole frames spans them, however they are cut", () => {
  assert.deepEqual(walkPayloads([2], [bytes("61"), bytes("62")]).map(hexOf), ["6162"]);
  assert.deepEqual(walkPayloads([5], [bytes("6162"), new Uint8Array(0), bytes("636465")]).map(hexOf), ["6162636465"]);
  // small payloads before and after it, packed in their own frames; empty frames around are harmless
  const frames = [bytes("0102"), bytes("616263"), bytes("6465"), bytes("0304"), new Uint8Array(0)];
  assert.deepEqual(walkPayloads([1, 1, 5, 0, 2], frames).map(hexOf), ["01", "02", "6162636465", "", "0304"]);
});

const random = (size: number): Uint8Array => {
  const out = new Uint8Array(size);
  for (let at = 0; at < size; at += 65536) crypto.getRandomValues(out.subarray(at, Math.min(size, at + 65536)));
  return out;
};
const same = (a: Uint8Array, b: Uint8Array): boolean => Buffer.from(a).equals(Buffer.from(b));

test("payloads over 1 MiB are cut into frames of 1 MiB (the last one shorter) and walk back whole", () => {
  assert.equal(MAX_FRAME, 1048576);
  for (const [size, cut] of [
    [MAX_FRAME, [MAX_FRAME]], // exactly 1 MiB: one frame
    [MAX_FRAME + 1, [MAX_FRAME, 1]],
    [3 * MAX_FRAME + 5, [MAX_FRAME, MAX_FRAME, MAX_FRAME, 5]],
  ] as const) {
    const payload = random(size);
    const small = bytes("0102");
    const frames = packPayloads([small, payload, small]);
    assert.deepEqual(frames.map((f) => f.byteLength), [2, ...cut, 2], `${size} bytes`);
    assert.deepEqual(cutPayload(payload).map((f) => f.byteLength), [...cut]);
    const [before, back, after] = walkPayloads([2, size, 2], frames);
    assert.ok(same(back!, payload) && same(before!, small) && same(after!, small), `${size} bytes`);
  }
});

test("packs of small payloads stop at 1 MiB", () => {
  const smalls = Array.from({ length: 16 }, () => random(65535)); // 64 KiB - 1: packed, not alone
  const atLimit = [...smalls, random(MAX_FRAME - 16 * 65535), bytes("ff")]; // the 17 first fill 1 MiB exactly
  const frames = packPayloads(atLimit);
  assert.deepEqual(frames.map((f) => f.byteLength), [MAX_FRAME, 1]);
  const back = walkPayloads(atLimit.map((p) => p.byteLength), frames);
  assert.ok(back.every((p, i) => same(p, atLimit[i]!)));
});

test("messages with payloads over 1 MiB encode into frames of at most 1 MiB and decode back", () => {
  const prefix = 5n << 40n;
  const big = random(3 * MAX_FRAME + 5);
  const msg: Msg = {
    type: "taskResults",
    results: [
      { taskId: prefix | 1n, status: "success", payload: bytes("31") },
      { taskId: prefix | 2n, status: "success", payload: big },
      { taskId: prefix | 3n, status: "success", payload: bytes("33") },
    ],
  };
  const frames = encode(msg);
  assert.ok(frames.every((f) => f.byteLength <= MAX_FRAME));
  assert.deepEqual(frames.slice(1).map((f) => f.byteLength), [1, MAX_FRAME, MAX_FRAME, MAX_FRAME, 5, 1]);
  const back = decode(frames);
  assert.ok(back.type === "taskResults" && same(back.results[1]!.payload, big));
  assert.deepEqual(back.type === "taskResults" && back.results.map((r) => r.payload.byteLength), [1, big.byteLength, 1]);
});

test("a header over 1 MiB is never built: batches are cut in halves, one task too big alone throws", () => {
  const prefix = 5n << 40n;
  const task = (n: bigint, keyword: string): Task => ({
    taskId: prefix | n, functionId: prefix | 99n, flags: 0, timeoutMs: 0, retries: 0, priority: 0, requires: ["payload=json"],
    args: [{ ref: 0n, keyword, payload: bytes("31") }],
  });
  const tasks = Array.from({ length: 9 }, (_, i) => task(BigInt(i + 1), "k".repeat(200_000)));
  assert.throws(() => encode({ type: "submitTasks", tasks }), FrameLimitError);
  const messages = encodeMessages({ type: "submitTasks", tasks });
  assert.ok(messages.length > 1 && messages.every((frames) => frames.every((f) => f.byteLength <= MAX_FRAME)));
  const ids = messages.flatMap((frames) => {
    const back = decode(frames);
    return back.type === "submitTasks" ? back.tasks.map((t) => t.taskId) : [];
  });
  assert.deepEqual(ids, tasks.map((t) => t.taskId)); // all of them, in order
  assert.throws(() => encodeMessages({ type: "submitTasks", tasks: [task(1n, "k".repeat(MAX_FRAME))] }), FrameLimitError);
});

test("columns are little-endian and their lengths are checked", () => {
  assert.equal(hexOf(u64Column([1n, 0x0102030405060708n])), "0100000000000000" + "0807060504030201");
  assert.equal(hexOf(u16Column([1, 0x0203])), "0100" + "0302");
  assert.deepEqual(readU64(bytes("0100000000000000ffffffffffffffff"), "x"), [1n, 0xffffffffffffffffn]);
  assert.deepEqual(readU16(bytes("03020100"), "x", 2), [0x0203, 1]);
  assert.throws(() => readU64(bytes("01000000"), "x"), MalformedError); // not whole values
  assert.throws(() => readU16(bytes("0100"), "x", 2), MalformedError); // wrong count
});

test("error payloads: u32 little-endian length, then the UTF-8 text", () => {
  assert.equal(hexOf(encodeErrorPayload("boom")), "04000000626f6f6d");
  assert.equal(decodeErrorPayload(bytes("04000000626f6f6d" + "80049500")), "boom"); // Python's pickle after: ignored
});

interface Golden {
  header: string;
  frames_hex: string[];
  payloads_hex: string[];
  fields: Record<string, unknown>;
}

const manifest = JSON.parse(readFileSync(join(GOLDEN, "manifest.json"), "utf8")) as Record<string, Golden>;
const big = (values: unknown): bigint[] => (values as number[]).map((v) => BigInt(v));
const u8s = (hex: unknown): number[] => Array.from(bytes(hex as string));

function goldenMessage(name: string): Msg {
  const golden = manifest[name]!;
  const header = Uint8Array.from(readFileSync(join(GOLDEN, golden.header)));
  return decode([header, ...golden.frames_hex.map(bytes)]);
}

test("every golden message decodes to its manifest's fields", () => {
  for (const [name, golden] of Object.entries(manifest)) {
    const msg = goldenMessage(name);
    assert.equal(msg.type, name, name);
    const f = golden.fields;
    switch (msg.type) {
      case "hello":
        assert.deepEqual(
          [msg.kind, msg.name, msg.hostname, msg.pid, msg.queueCapacity, msg.heartbeatIntervalMs, msg.capabilities, msg.unit],
          [f.kind, f.name, f.hostname, f.pid, f.queueCapacity, f.heartbeatIntervalMs, f.capabilities, f.unit],
        );
        break;
      case "welcome":
        assert.deepEqual(
          [msg.idPrefix, msg.schedulerName, msg.protected, msg.peerTimeoutMs, msg.maxPayloadBytes],
          [f.idPrefix, f.schedulerName, f.protected, f.peerTimeoutMs, BigInt(f.maxPayloadBytes as number)],
        );
        break;
      case "submitTasks":
      case "dispatchTasks": {
        assert.deepEqual(msg.tasks.map((t) => t.taskId), big(f.taskIds));
        assert.deepEqual(msg.tasks.map((t) => t.functionId), big(f.functionIds));
        assert.deepEqual(msg.tasks.map((t) => t.flags), u8s(f.flags));
        assert.deepEqual(msg.tasks.map((t) => t.args.length), f.argCounts);
        const args = msg.tasks.flatMap((t) => t.args);
        assert.deepEqual(args.map((a) => a.ref), big(f.argRefs));
        const keywords = f.keywords as string[];
        assert.deepEqual(args.map((a) => a.keyword), keywords.length ? keywords : args.map(() => ""));
        assert.deepEqual(
          args.filter((a) => a.ref === 0n).map((a) => hexOf(a.payload!)),
          golden.payloads_hex,
        );
        const timeouts = f.timeoutsMs as number[];
        assert.deepEqual(msg.tasks.map((t) => t.timeoutMs), timeouts.length ? timeouts : msg.tasks.map(() => 0));
        const requirements = (f.requirements as { capabilities: string[] }[]).map((r) => r.capabilities);
        const index = f.requirementIndex as number[];
        assert.deepEqual(
          msg.tasks.map((t) => t.requires),
          msg.tasks.map((_, k) => (requirements.length ? requirements[index.length ? index[k]! : 0]! : [])),
        );
        const keys = f.idempotencyKeys as string[];
        assert.deepEqual(msg.tasks.map((t) => t.idempotencyKey ?? ""), keys.length ? keys : msg.tasks.map(() => ""));
        break;
      }
      case "taskResults":
        assert.deepEqual(msg.results.map((r) => r.taskId), big(f.taskIds));
        assert.deepEqual(msg.results.map((r) => r.status), u8s(f.statuses).map((s) => STATUS_NAMES[s]));
        assert.deepEqual(msg.results.map((r) => hexOf(r.payload)), golden.payloads_hex);
        assert.deepEqual(msg.results.map((r) => r.durationUs ?? 0n), big(f.durationsUs));
        break;
      case "putObjects":
        assert.deepEqual(msg.objects.map((o) => o.objectId), big(f.objectIds));
        assert.deepEqual(msg.objects.map((o) => o.name), f.names);
        assert.deepEqual(msg.objects.map((o) => hexOf(o.payload)), golden.payloads_hex);
        break;
      case "cancelTasks":
      case "freeObjects":
      case "balanceRequest":
      case "balanceResponse":
      case "tasksStarted":
      case "explainTasks":
        assert.deepEqual(msg.ids, big(f.ids));
        break;
      case "taskExplanations":
        assert.deepEqual([msg.taskIds, msg.texts], [big(f.taskIds), f.texts]);
        break;
      case "error":
        assert.deepEqual([msg.code, msg.message, msg.ids], [f.code, f.message, [0xffffffffffffffffn]]);
        break;
      case "refused":
        assert.deepEqual([msg.reason, msg.keyProblem], [f.reason, f.keyProblem]);
        break;
      case "disconnect":
      case "shutdownRequest":
        assert.equal(msg.reason, f.reason);
        break;
      case "shutdown":
        assert.deepEqual([msg.reason, msg.workersStay], [f.reason, f.workersStay]);
        break;
      case "taskOutput":
        assert.deepEqual([msg.taskIds, msg.streams, msg.texts], [big(f.taskIds), u8s(f.streams), f.texts]);
        break;
      case "managerReport":
        assert.deepEqual(
          [msg.minUnits, msg.maxUnits, msg.workersPerUnit, msg.slotsPerWorker, msg.tier, msg.idleMs, msg.startTimeoutMs],
          [f.minUnits, f.maxUnits, f.workersPerUnit, f.slotsPerWorker, f.tier, BigInt(f.idleMs as number), BigInt(f.startTimeoutMs as number)],
        );
        assert.deepEqual([msg.units, msg.ended, msg.reason], [f.units, f.ended, f.reason]);
        break;
      case "scaleUnits":
        assert.deepEqual([msg.start, msg.stop, msg.reason], [f.start, f.stop, f.reason]);
        break;
      default:
        break;
    }
  }
});

test("messages this peer sends decode back to themselves", () => {
  const prefix = 3n << 40n;
  const tasks: Task[] = [
    { taskId: prefix | 10n, functionId: prefix | 1n, flags: 1, timeoutMs: 0, retries: 0, priority: 0, requires: ["payload=json"],
      args: [{ ref: 0n, keyword: "", payload: bytes("31") }, { ref: prefix | 2n, keyword: "" }] },
    { taskId: prefix | 11n, functionId: prefix | 1n, flags: 0, timeoutMs: 2000, retries: 2, priority: -1,
      requires: ["payload=json", "gpu"], args: [{ ref: 0n, keyword: "k", payload: new Uint8Array(0) }],
      idempotencyKey: "report-7" },
  ];
  for (const msg of [
    { type: "submitTasks", tasks },
    { type: "taskResults", results: [
      { taskId: prefix | 10n, status: "success", payload: bytes("32") },
      { taskId: prefix | 11n, status: "error", payload: encodeErrorPayload("no") },
    ] },
    { type: "putObjects", objects: [{ objectId: prefix | 1n, name: "add", payload: bytes("7b7d") }] },
    { type: "balanceResponse", ids: [] },
    { type: "hello", kind: "worker", name: "w", hostname: "h", pid: 1, heartbeatIntervalMs: 2000, queueCapacity: 4,
      capabilities: ["payload=json", "lang=ts"], protocolVersion: 1, unit: "" },
    { type: "hello", kind: "worker", name: "w2", hostname: "h", pid: 2, heartbeatIntervalMs: 2000, queueCapacity: 2,
      capabilities: ["payload=json", "gpu"], protocolVersion: 1, unit: "local-3" },
    { type: "hello", kind: "manager", name: "m", hostname: "h", pid: 3, heartbeatIntervalMs: 2000, queueCapacity: 0,
      capabilities: ["payload=json", "gpu"], protocolVersion: 1, unit: "" },
    { type: "managerReport", minUnits: 1, maxUnits: 8, workersPerUnit: 4, slotsPerWorker: 2, tier: 1, idleMs: 60000n,
      startTimeoutMs: 600000n, units: ["slurm-gpu-3", "slurm-gpu-4"], ended: ["slurm-gpu-2"], reason: "exit 0" },
    { type: "managerReport", minUnits: 0, maxUnits: 1, workersPerUnit: 1, slotsPerWorker: 1, tier: 0, idleMs: 0n,
      startTimeoutMs: 0n, units: [], ended: [], reason: "" },
    { type: "scaleUnits", start: ["slurm-gpu-5", "slurm-gpu-6"], stop: ["slurm-gpu-3"], reason: "12 tasks wait" },
    { type: "scaleUnits", start: [], stop: [], reason: "" },
    { type: "explainTasks", ids: [1n, 0xffffffffffffffffn] },
    { type: "taskExplanations", taskIds: [7n], texts: ["task 0x7 is queued: no worker is connected"] },
  ] as Msg[]) {
    const plain = (v: unknown): unknown =>
      typeof v === "bigint"
        ? `${v}n`
        : v instanceof Uint8Array
          ? hexOf(v)
          : Array.isArray(v)
            ? v.map(plain)
            : typeof v === "object" && v !== null
              ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
              : v;
    assert.deepEqual(plain(decode(encode(msg))), plain(msg));
  }
});

test("a header that is not a Message is malformed", () => {
  assert.throws(() => decode([bytes("00")]), MalformedError);
  assert.throws(() => decode([]), MalformedError);
  const hello = goldenMessage("hello");
  assert.throws(() => decode([...encode(hello), bytes("00")]), MalformedError); // a frame after a hello
});
