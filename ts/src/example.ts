// A small Scaler client for JSON tasks: `node ts/dist/example.js ADDRESS [--count N] [--require CAPABILITY]... [--keys DIR]
// [--big CHARS]`. Adds pairs of numbers on JSON workers (such as worker.ts), prints one JSON line with what came back,
// exits 0 when every sum is right (and reports which workers ran JSON tasks). With --require, the tasks also require
// those capabilities. With --big, it also echoes a string of CHARS characters (over 1 MiB: it spans frames both ways).
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "./client.js";

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      count: { type: "string", default: "10" },
      require: { type: "string", multiple: true, default: [] },
      "timeout-ms": { type: "string", default: "30000" },
      keys: { type: "string" },
      big: { type: "string", default: "0" },
    },
  });
  if (positionals.length !== 1) {
    console.error(
      "usage: node example.js ADDRESS [--count N] [--require CAPABILITY]... [--timeout-ms MS] [--keys DIR] [--big CHARS]",
    );
    return 2;
  }
  const count = Number(values.count);
  const timeoutMs = Number(values["timeout-ms"]);
  const capabilities = values.require as string[];
  const client = new Client(positionals[0]!, {
    name: "ts-example",
    timeoutMs,
    ...(values.keys !== undefined ? { keys: values.keys } : {}),
  });
  await client.connect();
  const report: Record<string, unknown> = {};
  try {
    const handles = client.submitMany(
      "add",
      Array.from({ length: count }, (_, i) => [i, 1000]),
      { capabilities },
    );
    const deadline = new Promise<never>((_, reject) => setTimeout(() => reject(new Error("timed out waiting for results")), timeoutMs).unref());
    const settled = await Promise.race([Promise.allSettled(handles.map((h) => h.result)), deadline]);
    const sums = settled.map((s) => (s.status === "fulfilled" ? s.value : null));
    const errors = settled.map((s) => (s.status === "rejected" ? `${(s.reason as Error).name}: ${(s.reason as Error).message}` : null));
    report.sums = sums;
    report.errors = errors;
    report.ok = sums.every((sum, i) => sum === i + 1000);
    if (capabilities.length === 0 && report.ok) {
      // which workers ran JSON tasks: one worker_info task per add task
      const infos = client.submitMany("worker_info", Array.from({ length: count }, () => []));
      const seen = await Promise.race([Promise.all(infos.map((h) => h.result)), deadline]);
      report.workers = [...new Set(seen.map((info) => JSON.stringify(info)))].map((info) => JSON.parse(info) as unknown);
      report.kwargs = await client.call("echo", [], { kwargs: { a: 1, b: "two" } });
      const long = client.submit("sleep", [60_000]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      report.explained = (await client.explain(long))[0];
      client.cancel(long);
      report.canceled = await Promise.race([long.result, deadline]).then(
        () => null,
        (error: Error) => error.name,
      );
      report.remoteError = await client.call("fail", ["boom"]).then(
        () => null,
        (error: Error) => `${error.name}: ${error.message.split("\n")[0]}`,
      );
    }
    const big = Number(values.big);
    if (big > 0 && report.ok) {
      const value = randomBytes(Math.ceil(big / 2)).toString("hex").slice(0, big);
      const echoed = await Promise.race([client.call("echo", [value], { capabilities }), deadline]);
      report.big = { chars: big, echoed: echoed === value };
      report.ok = echoed === value;
    }
  } finally {
    await client.disconnect();
  }
  console.log(JSON.stringify(report));
  return report.ok ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    setTimeout(() => process.exit(code), 2000).unref();
  },
  (error: unknown) => {
    // a refusal or a keys problem is one line that says what to do; anything else keeps its stack
    const known = error instanceof Error && ["ConnectionError", "AuthenticationError", "KeysError"].includes(error.name);
    console.error(known ? `${error.name}: ${error.message}` : error);
    process.exit(1);
  },
);
