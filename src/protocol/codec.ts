/**
 * Byte encoding of the agent protocol (docs/PROTOCOL.md): the host's `Q` and `K` frames, and a
 * strict, incremental decoder for everything the agent sends. Every agent byte is hostile: the
 * decoder rejects a frame as soon as its header is wrong and never buffers more than one frame.
 */
import type {
  AgentOutcome,
  AgentRequest,
  DisplayEnd,
  ReturnedFile,
  ReturnFileStatus,
} from "./types.js";
import { PROTOCOL_VERSION } from "./types.js";
import { LIMITS } from "../schema/limits.js";

const MiB = 1024 * 1024;
/** Largest host → agent frame (length field value). */
export const MAX_REQUEST_FRAME = 64 * MiB;
/** Largest agent → host frame (length field value). */
export const MAX_AGENT_FRAME = 16 * MiB + 4096;
/** Raw bytes in one `O`/`E` frame. */
export const MAX_OUTPUT_CHUNK = 64 * 1024;
/** Largest `maxFileBytes` the agent accepts: one returned file must fit one `F` frame. */
export const MAX_RETURN_FILE_BYTES = 16 * MiB;
/** Longest path the agent accepts (bytes). */
export const MAX_PATH_BYTES = 4000;
/** Longest `X` message (bytes). */
export const MAX_MESSAGE_BYTES = 1024;
/** uid/gid value meaning "keep the agent's own". */
export const KEEP_ID = 0xffffffff;
/** The `Q` session flag's bits (guest/agent-request.h): a session's call; may adopt the pre-start. */
export const SESSION_CALL = 1;
export const SESSION_ADOPT = 2;

export const EXIT_REASON_CODES = [
  "exited",
  "signaled",
  "timeout",
  "output_limit",
  "killed",
  "spawn_failed",
  "setup_failed",
] as const;
export const FILE_STATUS_CODES: readonly ReturnFileStatus[] = [
  "ok",
  "missing",
  "not_regular",
  "too_large",
  "total_limit",
  "error",
];

/**
 * Outputs the agent forwards in one call (`Z` frames with bytes before them): LIMITS.outputs's
 * count, and one more for the note naming what the sandbox left out past it.
 */
export const MAX_DISPLAYS = LIMITS.outputs.maxCount + 1;

/**
 * Stream runs a call's `shown` keeps in the order they came. Code that alternates one-byte writes
 * to stdout and stderr makes a run per write (600,000 in SEC-OUTPUT's flood), and each run is an
 * entry of structuredContent.outputs: past this many, a run joins its stream's latest run since
 * the last output, so the bytes each stream wrote before every output (where an output is placed)
 * stay exact and the list stays short (at most this and two per output).
 */
export const MAX_STREAM_RUNS = 256;

/** The `Z` frame's byte, by wire number (guest/agent-display.h). */
export const DISPLAY_END_CODES: readonly DisplayEnd[] = ["whole", "over", "cut"];

export type AgentExit = NonNullable<AgentOutcome["exit"]>;

/** One decoded agent → host frame. */
export type AgentFrame =
  | { type: "ready"; version: number }
  | { type: "started"; pid: number }
  | { type: "stdout"; data: Uint8Array }
  | { type: "stderr"; data: Uint8Array }
  | { type: "exit"; exit: AgentExit }
  | { type: "file"; file: ReturnedFile }
  | { type: "display"; data: Uint8Array }
  | { type: "display_end"; end: DisplayEnd }
  | { type: "done" };

const TYPE_BYTE = {
  ready: 0x52, // R
  started: 0x53, // S
  stdout: 0x4f, // O
  stderr: 0x45, // E
  exit: 0x58, // X
  file: 0x46, // F
  display: 0x59, // Y
  display_end: 0x5a, // Z
  done: 0x44, // D
} as const;
const REQUEST = 0x51; // Q
const KILL = 0x4b; // K

/** Largest length field per agent frame type: a wrong header fails before its payload arrives. */
const MAX_LENGTH_BY_TYPE = new Map<number, number>([
  [TYPE_BYTE.ready, 1 + 4],
  [TYPE_BYTE.started, 1 + 4],
  [TYPE_BYTE.stdout, 1 + MAX_OUTPUT_CHUNK],
  [TYPE_BYTE.stderr, 1 + MAX_OUTPUT_CHUNK],
  [TYPE_BYTE.exit, 1 + 19 + MAX_MESSAGE_BYTES],
  [TYPE_BYTE.file, MAX_AGENT_FRAME],
  [TYPE_BYTE.display, 1 + MAX_OUTPUT_CHUNK],
  [TYPE_BYTE.display_end, 1 + 1],
  [TYPE_BYTE.done, 1],
]);

// ---------------------------------------------------------------------------------------------
// Host → agent

class Writer {
  private readonly parts: Buffer[] = [];
  size = 0;
  private push(b: Buffer): void {
    this.parts.push(b);
    this.size += b.length;
  }
  u8(v: number): void {
    this.push(Buffer.from([v]));
  }
  u32(v: number, what: string): void {
    if (!Number.isInteger(v) || v < 0 || v > 0xffffffff)
      throw new RangeError(`${what} must be an integer in [0, 2^32-1], got ${v}`);
    const b = Buffer.alloc(4);
    b.writeUInt32BE(v);
    this.push(b);
  }
  u64(v: number, what: string): void {
    if (!Number.isSafeInteger(v) || v < 0)
      throw new RangeError(`${what} must be a non-negative safe integer, got ${v}`);
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(v));
    this.push(b);
  }
  bytes(v: Uint8Array, what: string): void {
    this.u32(v.length, `${what} length`);
    this.push(Buffer.from(v.buffer, v.byteOffset, v.length));
  }
  str(v: string, what: string): void {
    this.bytes(Buffer.from(v, "utf8"), what);
  }
  frame(type: number, limit: number): Buffer {
    const length = 1 + this.size;
    if (length > limit) throw new RangeError(`frame is ${length} bytes; the limit is ${limit}`);
    const head = Buffer.alloc(5);
    head.writeUInt32BE(length);
    head[4] = type;
    return Buffer.concat([head, ...this.parts], 4 + length);
  }
}

/**
 * Encodes the `Q` frame. Throws RangeError when a value cannot be represented (non-integers,
 * out-of-range numbers, uid without gid, a frame over MAX_REQUEST_FRAME): that is a host bug.
 * Paths and env entries are encoded as given; the schema normalises them and the agent
 * re-checks them (absolute, no `.`/`..`/empty component, no NUL) and refuses with setup_failed.
 */
export function encodeRequest(req: AgentRequest): Buffer {
  const w = new Writer();
  if ((req.uid === null) !== (req.gid === null))
    throw new RangeError("uid and gid must both be null or both be set");
  if (req.uid === KEEP_ID || req.gid === KEEP_ID)
    throw new RangeError("uid/gid 0xFFFFFFFF is reserved; use null to keep the agent's ids");
  w.u32(PROTOCOL_VERSION, "version");
  w.u32(req.timeoutMs, "timeoutMs");
  w.u64(req.maxStdoutBytes, "maxStdoutBytes");
  w.u64(req.maxStderrBytes, "maxStderrBytes");
  w.u64(req.maxFileBytes, "maxFileBytes");
  w.u64(req.maxTotalFileBytes, "maxTotalFileBytes");
  w.u32(req.uid ?? KEEP_ID, "uid");
  w.u32(req.gid ?? KEEP_ID, "gid");
  w.str(req.cwd, "cwd");
  w.u32(req.argv.length, "argc");
  req.argv.forEach((a, i) => w.str(a, `argv[${i}]`));
  const env = Object.entries(req.env);
  w.u32(env.length, "envc");
  for (const [name, value] of env) w.str(`${name}=${value}`, `env ${name}`);
  w.u32(req.files.length, "filec");
  req.files.forEach((f, i) => {
    w.str(f.path, `files[${i}].path`);
    w.u32(f.mode, `files[${i}].mode`);
    w.bytes(f.content, `files[${i}].content`);
  });
  w.u32(req.returnFiles.length, "retc");
  req.returnFiles.forEach((p, i) => w.str(p, `returnFiles[${i}]`));
  w.u32(req.session ? SESSION_CALL | (req.session.adopt ? SESSION_ADOPT : 0) : 0, "session");
  w.str(req.session?.kernel ?? "", "session.kernel");
  w.u64(req.clockMs ?? 0, "clockMs");
  return w.frame(REQUEST, MAX_REQUEST_FRAME);
}

/** The `K` frame: kill the whole tree now, report reason `killed`. */
export function encodeKill(): Buffer {
  return Buffer.from([0, 0, 0, 1, KILL]);
}

// ---------------------------------------------------------------------------------------------
// Agent → host: parsing

class Reader {
  off = 0;
  constructor(private readonly b: Buffer) {}
  get left(): number {
    return this.b.length - this.off;
  }
  u8(): number | null {
    if (this.left < 1) return null;
    return this.b[this.off++] ?? null;
  }
  u32(): number | null {
    if (this.left < 4) return null;
    const v = this.b.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }
  i32(): number | null {
    if (this.left < 4) return null;
    const v = this.b.readInt32BE(this.off);
    this.off += 4;
    return v;
  }
  u64(): bigint | null {
    if (this.left < 8) return null;
    const v = this.b.readBigUInt64BE(this.off);
    this.off += 8;
    return v;
  }
  bytes(): Buffer | null {
    const n = this.u32();
    if (n === null || this.left < n) return null;
    const v = this.b.subarray(this.off, this.off + n);
    this.off += n;
    return v;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
function decodeUtf8(b: Uint8Array): string | null {
  try {
    return utf8.decode(b);
  } catch {
    return null;
  }
}

export type ParseResult = { ok: true; frame: AgentFrame } | { ok: false; error: string };
const bad = (error: string): ParseResult => ({ ok: false, error });

function parseExit(r: Reader): ParseResult {
  const reasonCode = r.u8();
  const value = r.i32();
  const outT = r.u8();
  const errT = r.u8();
  const durationMs = r.u32();
  const oomKills = r.u32();
  const message = r.bytes();
  if (
    reasonCode === null ||
    value === null ||
    outT === null ||
    errT === null ||
    durationMs === null ||
    oomKills === null ||
    message === null
  )
    return bad("X: truncated payload");
  if (r.left !== 0) return bad(`X: ${r.left} trailing bytes`);
  const reason = EXIT_REASON_CODES[reasonCode];
  if (reason === undefined) return bad(`X: unknown reason ${reasonCode}`);
  if (outT > 1 || errT > 1) return bad("X: truncated flags must be 0 or 1");
  if (reason === "exited" && (value < 0 || value > 255)) return bad(`X: exit status ${value}`);
  if (reason === "signaled" && (value < 1 || value > 64)) return bad(`X: signal ${value}`);
  if (reason !== "exited" && reason !== "signaled" && value !== 0)
    return bad(`X: value ${value} with reason ${reason}`);
  if (message.length > MAX_MESSAGE_BYTES) return bad("X: message too long");
  const text = decodeUtf8(message);
  if (text === null) return bad("X: message is not UTF-8");
  return {
    ok: true,
    frame: {
      type: "exit",
      exit: {
        reason,
        value,
        stdoutTruncated: outT === 1,
        stderrTruncated: errT === 1,
        durationMs,
        oomKills,
        message: text,
      },
    },
  };
}

function parseFile(r: Reader): ParseResult {
  const pathBytes = r.bytes();
  const statusCode = r.u8();
  const size = r.u64();
  const content = r.bytes();
  if (pathBytes === null || statusCode === null || size === null || content === null)
    return bad("F: truncated payload");
  if (r.left !== 0) return bad(`F: ${r.left} trailing bytes`);
  if (pathBytes.length === 0 || pathBytes.length > MAX_PATH_BYTES) return bad("F: bad path length");
  const path = decodeUtf8(pathBytes);
  if (path === null) return bad("F: path is not UTF-8");
  const status = FILE_STATUS_CODES[statusCode];
  if (status === undefined) return bad(`F: unknown status ${statusCode}`);
  if (size > BigInt(Number.MAX_SAFE_INTEGER)) return bad("F: size out of range");
  if (status !== "ok" && content.length !== 0) return bad(`F: content with status ${status}`);
  if (content.length > MAX_RETURN_FILE_BYTES) return bad("F: content too large");
  if (status === "ok" && size !== BigInt(content.length))
    return bad("F: size differs from content length");
  return {
    ok: true,
    frame: { type: "file", file: { path, status, size: Number(size), content: copy(content) } },
  };
}

/** Copies out of the receive buffer so a frame never pins a larger chunk. */
function copy(b: Buffer): Uint8Array {
  return new Uint8Array(b);
}

/** Parses one agent frame's payload strictly (exact sizes, enum ranges, UTF-8). */
export function parseAgentFrame(type: number, payload: Buffer): ParseResult {
  const r = new Reader(payload);
  switch (type) {
    case TYPE_BYTE.ready: {
      if (payload.length !== 4) return bad("R: payload must be 4 bytes");
      return { ok: true, frame: { type: "ready", version: payload.readUInt32BE(0) } };
    }
    case TYPE_BYTE.started: {
      if (payload.length !== 4) return bad("S: payload must be 4 bytes");
      const pid = payload.readUInt32BE(0);
      if (pid === 0 || pid > 0x7fffffff) return bad(`S: pid ${pid}`);
      return { ok: true, frame: { type: "started", pid } };
    }
    case TYPE_BYTE.stdout:
    case TYPE_BYTE.stderr: {
      if (payload.length === 0 || payload.length > MAX_OUTPUT_CHUNK)
        return bad("O/E: chunk must be 1..65536 bytes");
      const kind = type === TYPE_BYTE.stdout ? "stdout" : "stderr";
      return { ok: true, frame: { type: kind, data: copy(payload) } };
    }
    case TYPE_BYTE.display:
      if (payload.length === 0 || payload.length > MAX_OUTPUT_CHUNK)
        return bad("Y: chunk must be 1..65536 bytes");
      return { ok: true, frame: { type: "display", data: copy(payload) } };
    case TYPE_BYTE.display_end: {
      const end = payload.length === 1 ? DISPLAY_END_CODES[payload[0] ?? 255] : undefined;
      if (end === undefined) return bad("Z: payload must be one byte, 0..2");
      return { ok: true, frame: { type: "display_end", end } };
    }
    case TYPE_BYTE.exit:
      return parseExit(r);
    case TYPE_BYTE.file:
      return parseFile(r);
    case TYPE_BYTE.done:
      if (payload.length !== 0) return bad("D: payload must be empty");
      return { ok: true, frame: { type: "done" } };
    default:
      return bad(`unknown frame type 0x${type.toString(16).padStart(2, "0")}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Agent → host: framing

export interface DecodeBatch {
  /** Frames completed by this push, in order (also those before an error). */
  frames: AgentFrame[];
  /** Set once the stream is invalid; the decoder stays failed and returns it on every push. */
  error: string | null;
}

/**
 * Incremental decoder for the agent's byte stream. Holds at most one incomplete frame
 * (≤ MAX_AGENT_FRAME + 4 bytes): lengths are checked as soon as the 5-byte header is in.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private size = 0;
  private error: string | null = null;

  /** Bytes held for an incomplete frame. */
  get buffered(): number {
    return this.size;
  }

  push(chunk: Uint8Array): DecodeBatch {
    const frames: AgentFrame[] = [];
    if (this.error !== null) return { frames, error: this.error };
    if (chunk.length > 0) {
      this.chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));
      this.size += chunk.length;
    }
    while (this.size >= 5) {
      const head = this.peek(5);
      const length = head.readUInt32BE(0);
      const type = head[4] ?? 0;
      const max = MAX_LENGTH_BY_TYPE.get(type);
      if (max === undefined)
        return this.fail(frames, `unknown frame type 0x${type.toString(16).padStart(2, "0")}`);
      if (length === 0 || length > MAX_AGENT_FRAME)
        return this.fail(frames, `frame length ${length} out of range`);
      if (length > max)
        return this.fail(
          frames,
          `frame length ${length} too large for type ${String.fromCharCode(type)}`,
        );
      if (this.size < 4 + length) break;
      const whole = this.take(4 + length);
      const parsed = parseAgentFrame(type, whole.subarray(5));
      if (!parsed.ok) return this.fail(frames, parsed.error);
      frames.push(parsed.frame);
    }
    return { frames, error: null };
  }

  private fail(frames: AgentFrame[], error: string): DecodeBatch {
    this.error = error;
    this.chunks = [];
    this.size = 0;
    return { frames, error };
  }

  /** The first n buffered bytes (n ≤ size), concatenating only the chunks needed. */
  private peek(n: number): Buffer {
    const first = this.chunks[0];
    if (first && first.length >= n) return first.subarray(0, n);
    const joined = Buffer.concat(this.chunks, this.size);
    this.chunks = [joined];
    return joined.subarray(0, n);
  }

  private take(n: number): Buffer {
    const joined =
      this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    const out = joined.subarray(0, n);
    const rest = joined.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.size = rest.length;
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Agent-side encoders and a request decoder: the mirror image, for tests and diagnostics.

/** Encodes an agent → host frame exactly as the agent does. */
export function encodeAgentFrame(frame: AgentFrame): Buffer {
  const w = new Writer();
  switch (frame.type) {
    case "ready":
      w.u32(frame.version, "version");
      break;
    case "started":
      w.u32(frame.pid, "pid");
      break;
    case "stdout":
    case "stderr":
    case "display":
      return frameOf(TYPE_BYTE[frame.type], Buffer.from(frame.data));
    case "display_end":
      return frameOf(TYPE_BYTE.display_end, Buffer.from([DISPLAY_END_CODES.indexOf(frame.end)]));
    case "exit": {
      const e = frame.exit;
      const head = Buffer.alloc(15);
      head[0] = EXIT_REASON_CODES.indexOf(e.reason);
      head.writeInt32BE(e.value, 1);
      head[5] = e.stdoutTruncated ? 1 : 0;
      head[6] = e.stderrTruncated ? 1 : 0;
      head.writeUInt32BE(e.durationMs, 7);
      head.writeUInt32BE(e.oomKills, 11);
      const msg = Buffer.from(e.message, "utf8");
      const len = Buffer.alloc(4);
      len.writeUInt32BE(msg.length);
      return frameOf(TYPE_BYTE.exit, Buffer.concat([head, len, msg]));
    }
    case "file":
      w.str(frame.file.path, "path");
      w.u8(FILE_STATUS_CODES.indexOf(frame.file.status));
      w.u64(frame.file.size, "size");
      w.bytes(frame.file.content, "content");
      break;
    case "done":
      break;
  }
  return w.frame(TYPE_BYTE[frame.type], MAX_AGENT_FRAME);
}

function frameOf(type: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(1 + payload.length);
  head[4] = type;
  return Buffer.concat([head, payload]);
}

/** Decodes a whole `Q` frame back into a request (tests, diagnostics). Throws on bad input. */
export function decodeRequest(frame: Buffer): AgentRequest {
  if (frame.length < 5 || frame.readUInt32BE(0) !== frame.length - 4 || frame[4] !== REQUEST)
    throw new Error("not a single Q frame");
  const r = new Reader(frame.subarray(5));
  const need = <T>(v: T | null): T => {
    if (v === null) throw new Error("truncated Q payload");
    return v;
  };
  const u64 = () => Number(need(r.u64()));
  const str = () => need(r.bytes()).toString("utf8");
  const version = need(r.u32());
  if (version !== PROTOCOL_VERSION) throw new Error(`version ${version}`);
  const timeoutMs = need(r.u32());
  const maxStdoutBytes = u64();
  const maxStderrBytes = u64();
  const maxFileBytes = u64();
  const maxTotalFileBytes = u64();
  const uid = need(r.u32());
  const gid = need(r.u32());
  const cwd = str();
  const argv = Array.from({ length: need(r.u32()) }, str);
  const env = Object.fromEntries(
    Array.from({ length: need(r.u32()) }, () => {
      const entry = str();
      const eq = entry.indexOf("=");
      if (eq <= 0) throw new Error("env entry without NAME=");
      return [entry.slice(0, eq), entry.slice(eq + 1)] as const;
    }),
  );
  const files = Array.from({ length: need(r.u32()) }, () => ({
    path: str(),
    mode: need(r.u32()),
    content: new Uint8Array(need(r.bytes())),
  }));
  const returnFiles = Array.from({ length: need(r.u32()) }, str);
  const session = need(r.u32());
  const kernel = str();
  if ((session & ~(SESSION_CALL | SESSION_ADOPT)) !== 0 || session === SESSION_ADOPT)
    throw new Error(`session flag ${session}`);
  if (!session && kernel) throw new Error("a kernel without a session");
  const clockMs = u64();
  if (r.left !== 0) throw new Error("trailing bytes in Q payload");
  return {
    timeoutMs,
    maxStdoutBytes,
    maxStderrBytes,
    maxFileBytes,
    maxTotalFileBytes,
    uid: uid === KEEP_ID ? null : uid,
    gid: gid === KEEP_ID ? null : gid,
    cwd,
    argv,
    env,
    files,
    returnFiles,
    ...(session
      ? {
          session: {
            kernel: kernel || null,
            ...(session & SESSION_ADOPT ? { adopt: true } : {}),
          },
        }
      : {}),
    ...(clockMs ? { clockMs } : {}),
  };
}
