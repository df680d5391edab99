// CurveZMQ keys for a TypeScript peer, read from the keys directory scaler_keygen makes (docs/security.md):
// `scheduler.key` (the scheduler's public key) and `client.key_secret` or `worker.key_secret` (this peer's pair),
// in the ZPL "zcert" format. The same rules as the Python peers: an explicit directory, else $SCALER_KEYS if set and
// not empty, else no keys; `false` turns keys off whatever the environment says.
import { createPrivateKey, createPublicKey } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";

export type Role = "client" | "worker";

export interface PeerKeys {
  serverKey: string; // the scheduler's public key (Z85, 40 characters)
  publicKey: string;
  secretKey: string;
  source: string; // the file the pair came from, for messages
}

export class KeysError extends Error {
  override name = "KeysError";
}

export const KEYS_ENV = "SCALER_KEYS";

/** The keys directory to use: `keys` if a non-empty string, none if false, else $SCALER_KEYS if set and not empty. */
export function resolveKeys(keys: string | false | undefined): string | undefined {
  if (keys === false) return undefined;
  const chosen = keys || process.env[KEYS_ENV] || "";
  return chosen ? resolve(chosen) : undefined;
}

/** scheduler.key and <role>.key_secret from `directory`; a KeysError that says what to do when one is wrong. */
export function loadPeerKeys(directory: string, role: Role): PeerKeys {
  const root = resolve(directory);
  if (!existsSync(root) || !statSync(root).isDirectory()) {
    throw new KeysError(
      `the keys directory ${root} does not exist: create keys with: scaler_keygen ${root}, or point --keys (or ` +
        `${KEYS_ENV}) at the directory that holds them`,
    );
  }
  const serverPath = join(root, "scheduler.key");
  const secretPath = join(root, `${role}.key_secret`);
  const server = read(serverPath, `copy scheduler.key from the keys directory scaler_keygen made (every machine needs it)`);
  const pair = read(
    secretPath,
    `copy ${role}.key_secret (or the whole folder made for a named ${role}) from the keys directory scaler_keygen made`,
  );
  if (pair.secret === undefined) {
    throw new KeysError(`${secretPath} holds no secret-key (is it a copy of a public .key file?)`);
  }
  if (curvePublic(pair.secret) !== pair.public) {
    throw new KeysError(`${secretPath} holds a secret-key that does not match its public-key: make it again with scaler_keygen`);
  }
  return { serverKey: server.public, publicKey: pair.public, secretKey: pair.secret, source: secretPath };
}

const Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
const Z85_KEY = /^[0-9a-zA-Z.\-:+=^!/*?&<>()[\]{}@%$#]{40}$/;

function read(path: string, fix: string): { public: string; secret: string | undefined } {
  let text: string;
  try {
    if (!statSync(path).isFile()) throw new KeysError(`${path} is not a file: ${fix}`);
    text = readFileSync(path, "utf8");
  } catch (error) {
    if (error instanceof KeysError) throw error;
    if ((error as NodeJS.ErrnoException).code === "ENOENT") throw new KeysError(`${path} is missing: ${fix}`);
    throw new KeysError(`${path} cannot be read (${(error as Error).message})`);
  }
  // zcert: a "curve" section with `public-key = "..."` and, in a secret file, `secret-key = "..."`
  const field = (name: string): string | undefined => {
    const match = new RegExp(`^\\s*${name}\\s*=\\s*"([^"]*)"\\s*$`, "m").exec(text);
    return match ? match[1] : undefined;
  };
  const publicKey = field("public-key");
  if (publicKey === undefined) throw new KeysError(`${path} holds no public-key: it is not a key file`);
  if (!Z85_KEY.test(publicKey)) throw new KeysError(`${path} holds a public-key that is not 40 Z85 characters`);
  const secretKey = field("secret-key");
  if (secretKey !== undefined && !Z85_KEY.test(secretKey)) {
    throw new KeysError(`${path} holds a secret-key that is not 40 Z85 characters`);
  }
  return { public: publicKey, secret: secretKey };
}

export function z85Decode(text: string): Buffer {
  const out = Buffer.alloc((text.length / 5) * 4);
  for (let i = 0; i < text.length; i += 5) {
    let value = 0;
    for (let k = 0; k < 5; k++) value = value * 85 + Z85.indexOf(text[i + k]!);
    out.writeUInt32BE(value >>> 0, (i / 5) * 4);
  }
  return out;
}

export function z85Encode(bytes: Buffer): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += 4) {
    let value = bytes.readUInt32BE(i);
    const chunk: string[] = [];
    for (let k = 0; k < 5; k++) {
      chunk.unshift(Z85[value % 85]!);
      value = Math.floor(value / 85);
    }
    text += chunk.join("");
  }
  return text;
}

/** The Curve25519 public key of a secret key (both Z85), as libsodium's crypto_scalarmult_base computes it. */
export function curvePublic(secret: string): string {
  const pkcs8 = Buffer.concat([Buffer.from("302e020100300506032b656e04220420", "hex"), z85Decode(secret)]);
  const spki = createPublicKey(createPrivateKey({ key: pkcs8, format: "der", type: "pkcs8" })).export({
    format: "der",
    type: "spki",
  });
  return z85Encode(spki.subarray(spki.length - 32));
}
