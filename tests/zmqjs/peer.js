#!/usr/bin/env node
// One ZeroMQ socket played by libzmq itself (through zeromq.js), for spark-zmq's tests.
//
// Its prebuilt libzmq 4.3.5 has the draft API (real SCATTER/GATHER) and CURVE, which the
// pyzmq wheel used by the project lacks, so tests can check the connector against a peer
// nobody here wrote.  tests/helpers/zmqjs_peer.py drives this program; run it by hand like:
//
//   node peer.js --type push --bind 'tcp://127.0.0.1:*' --count 3 --size 8
//   node peer.js --type rep --bind 'tcp://127.0.0.1:*' --prefix 'js:'
//   node peer.js --type req-worker --connect tcp://127.0.0.1:5560    # a broker's worker
//
// stdout: one JSON object per line, nothing else (warnings and usage go to stderr):
//   {"event":"ready","endpoints":[...]}  after every bind/connect, before any traffic
//   {"event":"message","hex":"..."}      receivers: one per message ("parts":[hex,...]
//                                        instead of "hex" for a multipart message)
//   {"event":"sent","count":N}           senders: everything was queued (then linger, exit 0)
//   {"event":"request","hex":"..."}      servers: one per request, its body ("parts" if several)
//   {"event":"done","count":N}           receivers: --count N messages arrived; servers:
//                                        --count N requests answered (exit 0)
//   {"event":"stopped","count":N}        a line "stop" (or EOF) on stdin (exit 0)
//   {"event":"error","message":"..."}    a send timed out (exit 3) or the socket failed (exit 1)
// Exit 2, with a usage line on stderr, for bad arguments.
//
// Payload of message i (i = 0 .. count-1): PREFIX + ASCII decimal i + "-", then padded
// with "x" up to --size bytes in total (prefix included); a --size smaller than that
// leaves the message unpadded, so every message stays distinct and parseable.
//
// Servers answer each request with its body, PREFIX put in front of the first frame:
//   rep         a REP socket (the envelope is libzmq's business)
//   req-worker  a REQ socket that first sends the one frame "READY", then answers each
//               request [envelope..., "", body...] with [envelope..., "", PREFIX+body...]:
//               a worker of the Guide's load-balancing broker
"use strict"

const readline = require("readline")

const USAGE =
  "usage: node peer.js --type scatter|gather|push|pull|rep|req-worker (--bind EP | --connect EP)... " +
  "[--count N] [--size B] [--prefix TEXT] [--sndhwm N] [--rcvhwm N] [--send-timeout MS] " +
  "[--linger MS] [--curve-server SECRET_Z85 [--curve-public PUBLIC_Z85]] " +
  "[--curve-client PUBLIC_Z85:SECRET_Z85 --curve-server-key PUBLIC_Z85]"

function usage(problem) {
  process.stderr.write(`peer.js: ${problem}\n${USAGE}\n`)
  process.exit(2)
}

const SENDERS = new Set(["scatter", "push"])
const RECEIVERS = new Set(["gather", "pull"])
const SERVERS = new Set(["rep", "req-worker"])
const Z85_KEY = /^[0-9a-zA-Z.\-:+=^!/*?&<>()[\]{}@%$#]{40}$/

function parseArgs(argv) {
  const opts = { endpoints: [], linger: 5000 }
  const integer = (flag, text) => {
    if (!/^\d+$/.test(text)) usage(`${flag} needs a non-negative integer, got ${JSON.stringify(text)}`)
    return Number(text)
  }
  const key = (flag, text) => {
    if (!Z85_KEY.test(text)) usage(`${flag} needs a 40-character Z85 key`)
    return text
  }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]
    if (i + 1 >= argv.length) usage(`${flag} needs a value`)
    const value = argv[++i]
    switch (flag) {
      case "--type": opts.type = value; break
      case "--bind": opts.endpoints.push({ bind: true, endpoint: value }); break
      case "--connect": opts.endpoints.push({ bind: false, endpoint: value }); break
      case "--count": opts.count = integer(flag, value); break
      case "--size": opts.size = integer(flag, value); break
      case "--prefix": opts.prefix = value; break
      case "--sndhwm": opts.sndhwm = integer(flag, value); break
      case "--rcvhwm": opts.rcvhwm = integer(flag, value); break
      case "--send-timeout": opts.sendTimeout = integer(flag, value); break
      case "--linger": opts.linger = integer(flag, value); break
      case "--curve-server": opts.curveSecret = key(flag, value); break
      case "--curve-public": opts.curvePublic = key(flag, value); break
      case "--curve-server-key": opts.curveServerKey = key(flag, value); break
      case "--curve-client": {
        // Split by position, not on ":": the Z85 alphabet itself contains ":".
        if (value.length !== 81 || value[40] !== ":") usage(`${flag} needs PUBLIC_Z85:SECRET_Z85`)
        opts.curveClient = { publicKey: key(flag, value.slice(0, 40)), secretKey: key(flag, value.slice(41)) }
        break
      }
      default: usage(`unknown argument ${JSON.stringify(flag)}`)
    }
  }
  const sender = SENDERS.has(opts.type)
  const server = SERVERS.has(opts.type)
  if (!sender && !server && !RECEIVERS.has(opts.type)) {
    usage(`--type must be scatter, gather, push, pull, rep or req-worker`)
  }
  if (!opts.endpoints.length) usage("give at least one --bind or --connect")
  if (sender && opts.count === undefined) usage(`--type ${opts.type} needs --count`)
  for (const [field, flag] of [["size", "--size"], ["prefix", "--prefix"], ["sndhwm", "--sndhwm"],
    ["sendTimeout", "--send-timeout"]]) {
    if (server && field === "prefix") continue // servers prefix their replies
    if (!sender && opts[field] !== undefined) usage(`${flag} is for senders (scatter, push)`)
  }
  if (sender && opts.rcvhwm !== undefined) usage("--rcvhwm is for receivers (gather, pull)")
  if (opts.curveSecret && opts.curveClient) usage("a peer is a CURVE server or a CURVE client, not both")
  if (opts.curvePublic && !opts.curveSecret) usage("--curve-public needs --curve-server")
  if (!!opts.curveClient !== !!opts.curveServerKey) usage("--curve-client and --curve-server-key go together")
  opts.sender = sender
  opts.server = server
  return opts
}

// Output is buffered and written in chunks: one write per received message would cap a
// receiver far below 100,000 messages in a few seconds.  A flush is scheduled with
// setImmediate, which runs once the current batch of socket events is handled, so a test
// waiting for a single message still sees it at once.  Pipes are synchronous on Linux.
let pending = []
let pendingBytes = 0
let flushScheduled = false
let finished = false // set once the peer is ending (sent, done, stopped or failed)

function flush() {
  flushScheduled = false
  if (!pending.length) return
  const chunk = pending.join("")
  pending = []
  pendingBytes = 0
  process.stdout.write(chunk)
}

function emit(event) {
  const line = JSON.stringify(event) + "\n"
  pending.push(line)
  pendingBytes += line.length
  if (pendingBytes >= 1 << 20) flush()
  else if (!flushScheduled) {
    flushScheduled = true
    setImmediate(flush)
  }
}

function payload(prefix, i, size) {
  const head = `${prefix}${i}-`
  return Buffer.from(head.length >= size ? head : head + "x".repeat(size - head.length))
}

function makeSocket(opts) {
  const zmq = require("zeromq")
  let Cls
  if (opts.type === "push") Cls = zmq.Push
  else if (opts.type === "pull") Cls = zmq.Pull
  else if (opts.type === "rep") Cls = zmq.Reply
  else if (opts.type === "req-worker") Cls = zmq.Request
  else {
    // zeromq/draft throws unless the addon was built with the draft API; it also emits a
    // process warning ("draft features are experimental"), which only reaches stderr.
    const draft = require("zeromq/draft")
    Cls = opts.type === "scatter" ? draft.Scatter : draft.Gather
  }
  // Options go to the constructor so they are set before any bind/connect (CURVE and
  // HWMs only apply to connections made afterwards).
  const options = { linger: opts.linger }
  if (opts.sndhwm !== undefined) options.sendHighWaterMark = opts.sndhwm
  if (opts.rcvhwm !== undefined) options.receiveHighWaterMark = opts.rcvhwm
  if (opts.sendTimeout !== undefined) options.sendTimeout = opts.sendTimeout
  if (opts.curveSecret) {
    // zeromq.js derives no key.  libzmq's CURVE server only uses its secret key, but the
    // public half is set too when given, as in a normal keypair setup.
    options.curveServer = true
    if (opts.curvePublic) options.curvePublicKey = opts.curvePublic
    options.curveSecretKey = opts.curveSecret
  }
  if (opts.curveClient) {
    options.curvePublicKey = opts.curveClient.publicKey
    options.curveSecretKey = opts.curveClient.secretKey
    options.curveServerKey = opts.curveServerKey
  }
  return new Cls(options)
}

async function main() {
  const opts = parseArgs(process.argv.slice(2))
  const sock = makeSocket(opts)
  let count = 0
  let stopping = false

  // Ending: close the socket and let the event loop drain instead of process.exit(), so
  // zeromq.js terminates its context at exit and libzmq honours --linger for queued
  // messages.  The unref'd timer is only a backstop if something keeps node alive.
  const finish = (code, event, linger) => {
    if (finished) return
    finished = true
    if (event) emit(event)
    flush()
    if (linger !== undefined && !sock.closed) sock.linger = linger
    if (!sock.closed) sock.close()
    rl.close()
    process.stdin.destroy()
    process.exitCode = code
    setTimeout(() => process.exit(code), (linger ?? opts.linger) + 5000).unref()
  }

  // "stop" on stdin, or stdin closing (the parent went away), ends any peer.
  const rl = readline.createInterface({ input: process.stdin })
  const stop = () => {
    stopping = true
    finish(0, { event: "stopped", count })
  }
  rl.on("line", (line) => { if (line.trim() === "stop") stop() })
  rl.on("close", stop)

  const endpoints = []
  for (const { bind, endpoint } of opts.endpoints) {
    try {
      if (bind) {
        await sock.bind(endpoint)
        endpoints.push(sock.lastEndpoint) // the real port of a tcp://...:* bind
      } else {
        sock.connect(endpoint)
        endpoints.push(endpoint)
      }
    } catch (err) {
      throw new Error(`${bind ? "bind" : "connect"} ${endpoint}: ${err.message}`)
    }
  }
  emit({ event: "ready", endpoints })
  flush()

  if (opts.sender) {
    const prefix = opts.prefix ?? ""
    const size = opts.size ?? 0
    for (; count < opts.count && !stopping; count++) {
      try {
        await sock.send(payload(prefix, count, size))
      } catch (err) {
        if (stopping) return
        const timedOut = err.code === "EAGAIN"
        // Exit promptly: drop what is still queued instead of lingering on it.
        return finish(timedOut ? 3 : 1, { event: "error", message: `send ${count}: ${err.message}` }, 0)
      }
    }
    if (stopping) return
    finish(0, { event: "sent", count })
  } else if (opts.server) {
    await serve(opts, sock, () => stopping, (n) => { count = n }, finish)
  } else {
    while (!stopping && (opts.count === undefined || count < opts.count)) {
      let msg
      try {
        msg = await sock.receive()
      } catch (err) {
        if (stopping) return
        return finish(1, { event: "error", message: `receive: ${err.message}` }, 0)
      }
      count++
      emit(msg.length === 1
        ? { event: "message", hex: msg[0].toString("hex") }
        : { event: "message", parts: msg.map((part) => part.toString("hex")) })
    }
    if (!stopping) finish(0, { event: "done", count })
  }
}

// Answer requests until --count of them are answered or "stop"; count(n) keeps the
// count that "stopped" reports up to date.
async function serve(opts, sock, stopping, setCount, finish) {
  const prefix = Buffer.from(opts.prefix ?? "")
  const worker = opts.type === "req-worker"
  let answered = 0
  try {
    if (worker) await sock.send("READY")
  } catch (err) {
    if (stopping()) return
    return finish(1, { event: "error", message: `send READY: ${err.message}` }, 0)
  }
  while (!stopping() && (opts.count === undefined || answered < opts.count)) {
    let msg
    try {
      msg = await sock.receive()
    } catch (err) {
      if (stopping()) return
      return finish(1, { event: "error", message: `receive: ${err.message}` }, 0)
    }
    let envelope = []
    let body = msg
    if (worker) {
      const delimiter = msg.findIndex((frame) => frame.length === 0)
      envelope = msg.slice(0, delimiter + 1) // none (-1): no envelope, all body
      body = msg.slice(delimiter + 1)
    }
    emit(body.length === 1
      ? { event: "request", hex: body[0].toString("hex") }
      : { event: "request", parts: body.map((part) => part.toString("hex")) })
    const reply = body.length ? [Buffer.concat([prefix, body[0]]), ...body.slice(1)] : [prefix]
    try {
      await sock.send([...envelope, ...reply])
    } catch (err) {
      if (stopping()) return
      return finish(1, { event: "error", message: `send reply ${answered}: ${err.message}` }, 0)
    }
    setCount(++answered)
  }
  if (!stopping()) finish(0, { event: "done", count: answered })
}

main().catch((err) => {
  if (finished) return // e.g. a "stop" closed the socket while a bind was under way
  emit({ event: "error", message: String(err && err.message || err) })
  flush()
  process.stderr.write(`${err && err.stack || err}\n`)
  process.exit(1)
})
