// Unit tests of the codec: the payload frame walk, columns, the golden messages of tests/protocol/golden, round trips.
// Run: node --test ts/dist/test/   (after the build)
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  decode,
  decodeErrorPayload,
  encode,
  encodeErrorPayload,
  MalformedError,
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

test("the frame walk refuses payloads that span frames, miss bytes or leave bytes over", () => {
  assert.throws(() => walkPayloads([2], [bytes("61"), bytes("62")]), MalformedError); // spans two frames
  assert.throws(() => walkPayloads([3], [bytes("6162")]), MalformedError); // missing bytes
  assert.throws(() => walkPayloads([1], []), MalformedError); // no frame
  assert.throws(() => walkPayloads([1], [bytes("6162")]), MalformedError); // a byte left over
  assert.throws(() => walkPayloads([1], [bytes("61"), bytes("62")]), MalformedError); // a frame left over
  assert.throws(() => walkPayloads([], [bytes("61")]), MalformedError);
});

test("packed payload frames walk back to the same payloads", () => {
  const big = new Uint8Array(70 * 1024).fill(7);
  const payloads = [bytes("01"), new Uint8Array(0), bytes("0203"), big, bytes("04")];
  const frames = packPayloads(payloads);
  assert.equal(frames.length, 3); // [01 0203] [big] [04]: the big one alone, the empty one takes no frame
  assert.deepEqual(walkPayloads(payloads.map((p) => p.byteLength), frames).map(hexOf), payloads.map(hexOf));
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
          [msg.kind, msg.name, msg.hostname, msg.pid, msg.queueCapacity, msg.heartbeatIntervalMs, msg.capabilities],
          [f.kind, f.name, f.hostname, f.pid, f.queueCapacity, f.heartbeatIntervalMs, f.capabilities],
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
        assert.deepEqual(msg.ids, big(f.ids));
        break;
      case "error":
        assert.deepEqual([msg.code, msg.message, msg.ids], [f.code, f.message, [0xffffffffffffffffn]]);
        break;
      case "refused":
        assert.deepEqual([msg.reason, msg.keyProblem], [f.reason, f.keyProblem]);
        break;
      case "disconnect":
      case "shutdown":
      case "shutdownRequest":
        assert.equal(msg.reason, f.reason);
        break;
      case "taskOutput":
        assert.deepEqual([msg.taskIds, msg.streams, msg.texts], [big(f.taskIds), u8s(f.streams), f.texts]);
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
      requires: ["payload=json", "gpu"], args: [{ ref: 0n, keyword: "k", payload: new Uint8Array(0) }] },
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
      capabilities: ["payload=json", "lang=ts"], protocolVersion: 1 },
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
