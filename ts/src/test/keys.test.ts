// Unit tests of the keys reader: Z85 (ZeroMQ RFC 32's vector), the Curve25519 public key of a secret key (checked
// against libzmq's own key pairs), and the zcert files scaler_keygen writes (their shape, and every refusal).
// Run: node --test ts/dist/test/   (after the build)
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import * as zmq from "zeromq";
import { curvePublic, KeysError, loadPeerKeys, resolveKeys, z85Decode, z85Encode } from "../keys.js";

test("Z85 reads and writes RFC 32's example", () => {
  const bytes = Buffer.from([0x86, 0x4f, 0xd2, 0x6f, 0xb5, 0x59, 0xf7, 0x5b]);
  assert.equal(z85Encode(bytes), "HelloWorld");
  assert.deepEqual(z85Decode("HelloWorld"), bytes);
});

test("the public key of a secret key is libzmq's", () => {
  for (let i = 0; i < 20; i++) {
    const pair = zmq.curveKeyPair();
    assert.equal(curvePublic(pair.secretKey), pair.publicKey);
  }
});

function zcert(publicKey: string, secretKey?: string): string {
  const secret = secretKey === undefined ? "" : `    secret-key = "${secretKey}"\n`;
  return `#   a comment\n\nmetadata\n    name = "x"\ncurve\n    public-key = "${publicKey}"\n${secret}`;
}

function keysDir(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "scaler-ts-keys-"));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(root, name), text, { mode: 0o600 });
  return root;
}

test("a keys directory gives the scheduler's key and the role's pair", () => {
  const server = zmq.curveKeyPair();
  const client = zmq.curveKeyPair();
  const root = keysDir({
    "scheduler.key": zcert(server.publicKey),
    "client.key_secret": zcert(client.publicKey, client.secretKey),
  });
  try {
    const keys = loadPeerKeys(root, "client");
    assert.deepEqual(keys, {
      serverKey: server.publicKey,
      publicKey: client.publicKey,
      secretKey: client.secretKey,
      source: join(root, "client.key_secret"),
    });
    assert.throws(() => loadPeerKeys(root, "worker"), (e: Error) => e instanceof KeysError && /worker\.key_secret is missing/.test(e.message));
  } finally {
    rmSync(root, { recursive: true });
  }
});

test("every wrong key file is refused with what to do", () => {
  const server = zmq.curveKeyPair();
  const a = zmq.curveKeyPair();
  const b = zmq.curveKeyPair();
  const cases: [Record<string, string>, RegExp][] = [
    [{ "client.key_secret": zcert(a.publicKey, a.secretKey) }, /scheduler\.key is missing: copy scheduler\.key/],
    [{ "scheduler.key": zcert(server.publicKey), "client.key_secret": zcert(a.publicKey) }, /holds no secret-key/],
    [{ "scheduler.key": zcert(server.publicKey), "client.key_secret": zcert(a.publicKey, b.secretKey) }, /does not match its public-key/],
    [{ "scheduler.key": "not a key file\n", "client.key_secret": zcert(a.publicKey, a.secretKey) }, /holds no public-key/],
    [{ "scheduler.key": zcert("short"), "client.key_secret": zcert(a.publicKey, a.secretKey) }, /not 40 Z85 characters/],
  ];
  for (const [files, expected] of cases) {
    const root = keysDir(files);
    try {
      assert.throws(() => loadPeerKeys(root, "client"), (e: Error) => e instanceof KeysError && expected.test(e.message), String(expected));
    } finally {
      rmSync(root, { recursive: true });
    }
  }
  const root = keysDir({});
  try {
    mkdirSync(join(root, "scheduler.key"));
    assert.throws(() => loadPeerKeys(root, "client"), /scheduler\.key is not a file/);
  } finally {
    rmSync(root, { recursive: true });
  }
  assert.throws(() => loadPeerKeys(join(tmpdir(), "no-such-scaler-keys"), "client"), /does not exist: create keys with: scaler_keygen/);
});

test("keys come from the option, else SCALER_KEYS; false turns them off", () => {
  const saved = process.env.SCALER_KEYS;
  try {
    process.env.SCALER_KEYS = "/from/env";
    assert.equal(resolveKeys("/given"), "/given");
    assert.equal(resolveKeys(undefined), "/from/env");
    assert.equal(resolveKeys(false), undefined);
    process.env.SCALER_KEYS = "";
    assert.equal(resolveKeys(undefined), undefined);
  } finally {
    if (saved === undefined) delete process.env.SCALER_KEYS;
    else process.env.SCALER_KEYS = saved;
  }
});
