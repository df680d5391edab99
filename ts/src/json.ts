// The JSON payload convention (capability `payload=json`): what the payloads of a JSON task hold.
//   function object: UTF-8 JSON {"function": "<name>"}; inline arguments and objects: UTF-8 JSON values;
//   keyword arguments: one extra last argument, a JSON object {keyword: value}; success: UTF-8 JSON of the return
//   value (undefined -> null); error: u32 little-endian length + UTF-8 text (as Python's error payloads).
import { text, utf8 } from "./protocol.js";

export const PAYLOAD_JSON = "payload=json";

export function functionObject(name: string): Uint8Array {
  return utf8(JSON.stringify({ function: name }));
}

/** The function name in a function object payload; throws an Error saying what is wrong. */
export function functionName(payload: Uint8Array): string {
  let value: unknown;
  try {
    value = JSON.parse(text(payload));
  } catch {
    throw new Error('the function object is not JSON (expected {"function": "<name>"})');
  }
  if (typeof value !== "object" || value === null || typeof (value as { function?: unknown }).function !== "string") {
    throw new Error('the function object is not {"function": "<name>"}');
  }
  return (value as { function: string }).function;
}

export function toJson(value: unknown): Uint8Array {
  const encoded = JSON.stringify(value === undefined ? null : value);
  if (encoded === undefined) throw new TypeError(`a ${typeof value} cannot be sent as JSON`);
  return utf8(encoded);
}

export function fromJson(payload: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(text(payload));
  } catch (error) {
    throw new Error(`${what} is not JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
}
